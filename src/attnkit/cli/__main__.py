"""``python -m attnkit.cli`` (as torchrun runs it): the ``attnkit`` command."""

import sys

from . import main

sys.exit(main())
