"""``python -m plait``: the same as the ``plait`` command."""

from plait.entrypoints.cli import run

run()
