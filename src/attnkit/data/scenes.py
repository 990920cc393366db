"""The old import path of :mod:`attnkit.data.datasets.scenes`, kept so existing code keeps working:
``attnkit.data.scenes`` *is* that module (the same object, private names and patches included)."""

import sys

from .datasets import scenes as _moved

sys.modules[__name__] = _moved
