"""The language-model task (issue 57): data for ``attnkit train language-model``.

So far only :mod:`.data` (one language's text as contiguous blocks of tokens) is here; the
command, its config and sampling come next.
"""
