"""The ``plait`` command. :func:`run` is its entry point: Ctrl-C at any moment, even while
the modules are still being imported, leaves with status 130 and no traceback."""

from __future__ import annotations

import sys

__all__ = ["run"]


def run() -> None:
    try:
        # lazy: inside the try, so Ctrl-C while the modules load still exits 130
        from plait.entrypoints.cli.main import main

        code = main()
    except KeyboardInterrupt:
        print("plait: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
