"""The models built from attnkit's attention: RNN translators, the captioner, the Transformer.

Importing this package registers every model class for :func:`attnkit.training.load_model`.
"""
from . import captioner  # noqa: F401
from . import seq2seq  # noqa: F401
from . import transformer  # noqa: F401
