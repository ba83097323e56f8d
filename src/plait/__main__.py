"""``python -m plait``: the same as the ``plait`` command."""

from plait.adapters.cli import run

run()
