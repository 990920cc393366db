"""Serving attnkit translators and language models on other inference engines.

- :mod:`attnkit.deploy.ct2_export`: ``attnkit export MODEL OUT --format ctranslate2`` writes a
  Transformer translator as a CTranslate2 model (Klein et al. 2020's C++ engine, int8 weights);
  it imports torch, since it reads the PyTorch checkpoint.
- :mod:`attnkit.deploy.ct2_engine`: translates with such an export; it imports only
  ``ctranslate2`` and ``sentencepiece`` (no torch), so a one-sentence ``attnkit translate
  --engine ctranslate2`` starts in a fraction of a second.
- :mod:`attnkit.deploy.hf_export`: ``attnkit export MODEL OUT --format huggingface`` writes a
  Transformer translator as a stock ``transformers`` model folder (Marian if post-norm, Pegasus if
  pre-norm) that ``AutoModelForSeq2SeqLM`` loads; :mod:`attnkit.deploy.hf_tokenizer` writes its
  ``tokenizer.json`` from the sentencepiece model. ``transformers`` is imported only while exporting.
- :mod:`attnkit.deploy.hf_lm_export`: the same command on one of attnkit's language models writes a
  stock ``LlamaForCausalLM`` (llama shape) or ``GPT2LMHeadModel`` (gpt2 shape) that
  ``AutoModelForCausalLM`` loads, with a tokenizer that puts ``<s>`` first as the model was trained;
  :mod:`attnkit.deploy.hf_folder` holds what the two Hugging Face exports share.
- :mod:`attnkit.deploy.manifest`: the small JSON (``attnkit.json``) that travels beside the
  engine's files: the tokenizer's digest, the language pair, the length penalty, the decoding limits,
  and the list of the files the export wrote.
- Where an export is written, and what ``--force`` replaces (only a folder an earlier attnkit export
  wrote, holding nothing else), is :mod:`attnkit.output_folder`'s, shared by every command that writes a folder.

This package's ``__init__`` imports nothing, so the torch-free path stays torch-free.
"""
