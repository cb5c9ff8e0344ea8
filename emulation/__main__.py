"""``python -m islands.emulation check|cleanup``: can the kernel emulate here; remove a crashed run's namespaces."""

import sys

from .wan import main

sys.exit(main())
