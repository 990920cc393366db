"""The language-model task (a causal Transformer trained on one language's text): ``attnkit train
language-model`` and sampling from its models.

:mod:`.data` (one language's text as contiguous blocks of tokens), :mod:`.config` (the options, one field
each), :mod:`.loss` (next-token cross-entropy, perplexity), :mod:`.train` (the run, with the shared trainer;
validation logs the induction scores).
"""

from .config import LanguageModelTaskConfig
from .train import train_language_model

__all__ = ["LanguageModelTaskConfig", "train_language_model"]
