"""``python -m attnkit``: the ``attnkit`` command, for an environment where its script is not on the PATH."""

import sys

from .cli import main

sys.exit(main())
