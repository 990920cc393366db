"""The language-model task (issue 57): data for ``attnkit train language-model``.

So far :mod:`.data` (one language's text as contiguous blocks of tokens), :mod:`.config` (the
options, one field each) and :mod:`.loss` (next-token cross-entropy, perplexity) are here; the
command, the trainer wiring and sampling come next.
"""
