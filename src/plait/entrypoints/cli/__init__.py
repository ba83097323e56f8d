"""The ``plait`` command. :func:`run` is its entry point: Ctrl-C at any moment once it
runs, even while the command's modules are still being imported, leaves with status 130
and no traceback (before it: Python's own start-up and this package's first ~1 ms)."""

from __future__ import annotations

# _signal, not signal: signal.py builds its enums on import (enum, re: milliseconds during
# which a Ctrl-C would still be a traceback); this module is what runs first
import _signal  # type: ignore[import-not-found]  # (no stub; signal's own functions)
import gc
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType

__all__ = ["run"]


def run() -> None:
    # While the command's modules load, Ctrl-C is noted, not raised: a KeyboardInterrupt
    # raised inside an extension module's initialisation (ssl's, asyncio's) can come out
    # as another error (a TypeError from _ssl was seen) that no handler expects.
    interrupted: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        interrupted.append(signum)

    # Only where Ctrl-C would raise: a process started with SIGINT ignored (a background
    # job of a script, nohup) keeps ignoring it while it loads too.
    guard = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
    previous = _signal.signal(_signal.SIGINT, note) if guard else None
    try:
        # lazy: after the handler above, so Ctrl-C while the modules load still exits 130
        from plait._gc import long_lived

        with long_lived():  # the modules live as long as the process: no collection now
            # lazy: as above
            from plait.entrypoints.cli.main import main
        # and out of the GC's reach: nothing else is in this process yet, and the last
        # collection, at exit, would scan them all
        gc.freeze()
    finally:
        if guard:
            _signal.signal(_signal.SIGINT, previous)
    try:
        if interrupted:
            raise KeyboardInterrupt
        code = main()
    except KeyboardInterrupt:
        print("plait: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
