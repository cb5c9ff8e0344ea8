"""``python -m islands``: the same as the ``islands`` command."""

import sys

from .cli import main

sys.exit(main())
