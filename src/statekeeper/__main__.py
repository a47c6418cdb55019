"""``python -m statekeeper``: the same as the ``statekeeper`` command."""

import sys

from statekeeper.cli import main

sys.exit(main())
