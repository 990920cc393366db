"""``attnkit.scores``: the score functions and score modules (see :mod:`attnkit.attention.scores`)."""
from .attention.scores import *  # noqa: F401,F403
from .attention.scores import __all__  # noqa: F401
