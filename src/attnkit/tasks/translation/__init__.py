"""Translation on any parallel corpus (the verse-aligned Spanish → English Bible built in, or the user's
own, :mod:`attnkit.data.corpus`): data, training, translating, evaluating.

The glue between the corpora (:mod:`attnkit.data.corpus`), the models
(:mod:`attnkit.models.seq2seq`, :mod:`attnkit.models.transformer`), the shared trainer and the
shared decoding, in the shape every task has: ``config`` (the task's options nesting the model's
config), ``data`` (tokenizer, batches), ``loss``, ``inference`` (the wrapper people use:
:class:`Translator`), ``metrics``, ``translation_quality`` (evaluation) and ``train``. The CLI (``attnkit train
translation``, ``translate``, ``evaluate translation``) calls these; so can a notebook.
"""

from ...data.datasets.bible import get_tokenizer  # the Bible's joint tokenizer, re-exported here
from .config import TRANSLATION_MODELS, TranslationConfig, model_config_class
from .data import read_lines, translation_batches
from .inference import Translation, TranslationAttention, Translator
from .lexical_shortlist import LexicalShortlist, ShortlistError
from .loss import translation_loss_fn
from .markup import MarkupTranslation, translate_document
from .metrics import LENGTH_BUCKETS, bleu_by_length, corpus_scores
from .train import build_optimizer, build_translation_model, train_translation
from .translation_quality import evaluate_translation, evaluate_translator

__all__ = [
    "LENGTH_BUCKETS",
    "TRANSLATION_MODELS",
    "LexicalShortlist",
    "MarkupTranslation",
    "ShortlistError",
    "Translation",
    "TranslationAttention",
    "TranslationConfig",
    "Translator",
    "bleu_by_length",
    "build_optimizer",
    "build_translation_model",
    "corpus_scores",
    "evaluate_translation",
    "evaluate_translator",
    "get_tokenizer",
    "model_config_class",
    "read_lines",
    "train_translation",
    "translate_document",
    "translation_batches",
    "translation_loss_fn",
]
