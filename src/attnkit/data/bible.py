"""The old import path of :mod:`attnkit.data.datasets.bible`, kept so existing code keeps working:
``attnkit.data.bible`` *is* that module (the same object, private names and patches included)."""

import sys

from .datasets import bible as _moved

if __name__ == "__main__":  # python -m attnkit.data.bible, as before
    _moved._main(sys.argv[1:])
else:
    sys.modules[__name__] = _moved
