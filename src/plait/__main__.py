"""``python -m plait``: the same as the ``plait`` command."""

import sys

from plait.adapters.cli.main import main

sys.exit(main())
