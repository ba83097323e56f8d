"""Whether a store can commit right now, for ``GET /v1/ready`` (issue 20 item 2).

Two signals, both real: the outcome of the store's own recent commits, and a probe that
commits something small. A probe alone can pass while real commits fail (a full disk
still takes a write that fits in space already allocated), so a commit that failed
because the store was unavailable keeps the store "not ready" until a later commit
succeeds, or for :data:`FAILURE_MEMORY_SECONDS` if nothing commits meanwhile (a process
that stopped writing must not stay unready for ever: then the probe decides alone).
"""

from __future__ import annotations

import threading
import time

from plait.domain.errors import StoreUnavailableError

__all__ = ["FAILURE_MEMORY_SECONDS", "CommitHealth"]

FAILURE_MEMORY_SECONDS = 10.0


class CommitHealth:
    """The last store-unavailable failure of a commit, until a commit succeeds. Thread
    safe: the SQLite store records from its I/O thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failure: StoreUnavailableError | None = None
        self._failed_at = 0.0

    def failed(self, error: StoreUnavailableError) -> None:
        with self._lock:
            self._failure, self._failed_at = error, time.monotonic()

    def succeeded(self) -> None:
        if self._failure is None:  # nothing to clear (the usual case: no lock taken)
            return
        with self._lock:
            self._failure = None

    @property
    def failing(self) -> bool:
        """A recent commit failed on an outage and none succeeded since."""
        with self._lock:
            failure, at = self._failure, self._failed_at
        return failure is not None and time.monotonic() - at < FAILURE_MEMORY_SECONDS

    def check(self) -> None:
        """Raise the last failure if it is recent and no commit succeeded since."""
        with self._lock:
            failure, at = self._failure, self._failed_at
        if failure is not None and time.monotonic() - at < FAILURE_MEMORY_SECONDS:
            raise StoreUnavailableError(
                f"the last commit failed and none succeeded since: {failure.message}",
                **failure.details,
            )
