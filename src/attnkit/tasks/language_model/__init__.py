"""The language-model task (issue 57): data for ``attnkit train language-model``.

So far :mod:`.data` (one language's text as contiguous blocks of tokens) and :mod:`.config` (the
options, one field each) are here; the command, its loss, the trainer wiring and sampling come next.
"""
