"""Store adapters: one class per backend, each implementing both
:class:`~plait.application.ports.SessionStore` and
:class:`~plait.application.ports.ArtifactStore`.

=====================  ===============================================================
``memory://``          :class:`~plait.adapters.stores.memory.store.MemoryStore` (tests, demos)
``sqlite:///PATH``     :class:`~plait.adapters.stores.sqlite.store.SqliteStore` (the default)
``jsonl:///DIR``       :class:`~plait.adapters.stores.jsonl.store.JsonlStore` (inspection)
``postgresql://...``   :class:`~plait.adapters.stores.postgres.store.PostgresStore` (service
                       mode: many processes and machines; libpq URL syntax)
=====================  ===============================================================

As in SQLAlchemy, everything after the third slash is the path: ``sqlite:///plait.db`` is
relative to the working directory, ``sqlite:////var/lib/plait.db`` is absolute.

Backends are imported lazily so ``import plait`` stays fast.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from plait.adapters.stores.shared.redact import redact_url
from plait.application.ports import (
    ApprovalStore,
    ArtifactStore,
    ForkStore,
    RetentionStore,
    SessionStore,
    SummaryStore,
)
from plait.domain.errors import ConfigError, StoreNotFoundError

if TYPE_CHECKING:
    from plait.adapters.stores.jsonl.store import JsonlStore, StoreWarning
    from plait.adapters.stores.memory.store import MemoryStore
    from plait.adapters.stores.postgres.feed import PgEventFeed
    from plait.adapters.stores.postgres.store import PostgresStore
    from plait.adapters.stores.shared.offload import IoMode, Offloaded
    from plait.adapters.stores.sqlite.store import SqliteStore

__all__ = [
    "IoMode",
    "JsonlStore",
    "MemoryStore",
    "Offloaded",
    "PgEventFeed",
    "PostgresStore",
    "SqliteStore",
    "Store",
    "StoreKind",
    "StoreWarning",
    "open_store",
    "protected_paths",
    "redact_url",
    "store_kind",
]

_FORMS = (
    "accepted store URLs: 'memory://', 'sqlite:///relative/path.db' or "
    "'sqlite:////absolute/path.db', 'jsonl:///relative/dir', 'jsonl:////absolute/dir' or "
    "'postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME'"
)


class Store(
    SessionStore, ArtifactStore, SummaryStore, ForkStore, ApprovalStore, RetentionStore, Protocol
):
    """What every built-in store adapter is: a session, artifact, summary, fork, approval
    and retention store in one. A store needs only be a session and an artifact store;
    the rest it declares in its ``capabilities`` (see docs/architecture-stores.md)."""


StoreKind = Literal["memory", "sqlite", "jsonl", "postgres"]

_SCHEMES: tuple[tuple[str, StoreKind], ...] = (
    ("sqlite:///", "sqlite"),
    ("jsonl:///", "jsonl"),
    ("postgresql://", "postgres"),
    ("postgres://", "postgres"),
)


def store_kind(url: str) -> StoreKind | None:
    """Which backend ``url`` names (``None``: none): the one place a store URL's form is
    read."""
    if url in ("memory://", "memory:"):
        return "memory"
    for scheme, kind in _SCHEMES:
        if url.startswith(scheme):
            return kind
    return None


def _path(url: str) -> Path:
    """The path of a ``sqlite:///`` or ``jsonl:///`` URL."""
    rest = url.split(":///", 1)[1]
    if not rest or "?" in rest or "#" in rest or rest.startswith(("\x00",)):
        shown = _shown(url)
        raise ConfigError(f"store URL {shown!r} has no usable path; {_FORMS}", url=shown)
    return Path(rest)


def _shown(url: str) -> str:
    return redact_url(url)


def _require_existing(url: str) -> None:
    if store_kind(url) in ("sqlite", "jsonl") and not _path(url).exists():
        raise StoreNotFoundError(
            f"no plait store at {url!r}; check --db or PLAIT_DB, or create one with "
            "'plait sessions new'",
            url=url,
        )


_SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def protected_paths(url: str) -> tuple[Path, ...]:
    """Absolute paths that hold the store named by ``url`` and its artifacts (for
    SQLite the database file and its ``-wal``/``-shm``/``-journal`` companions, for JSONL
    the whole directory; none for ``memory://``). The agent's tools must never reach
    them: the file tools deny them, and a sandbox should hide them."""
    kind = store_kind(url)
    if kind == "sqlite":
        db = _path(url).absolute()
        return (db, *(db.with_name(db.name + s) for s in _SQLITE_SIDECARS))
    if kind == "jsonl":
        return (_path(url).absolute(),)
    return ()


def open_store(url: str, *, create: bool = True, io: IoMode = "thread") -> Store:
    """Open the store named by ``url``. Unknown forms raise
    :class:`~plait.domain.errors.ConfigError` listing the accepted ones. With
    ``create=False`` (commands that only read) a missing SQLite file or JSONL directory
    raises :class:`~plait.domain.errors.StoreNotFoundError` and nothing is created. ``io``:
    where a SQLite store's calls run (:data:`~plait.adapters.stores.shared.offload.IoMode`)."""
    if not isinstance(url, str):
        raise ConfigError(f"store URL must be a string; {_FORMS}")
    if not create:
        _require_existing(url)
    kind = store_kind(url)
    if kind == "memory":
        # lazy: bisect and the in-memory tables (~18 ms), for memory:// only
        from plait.adapters.stores.memory.store import MemoryStore

        return MemoryStore()
    if kind == "sqlite":
        # lazy: sqlite3 and the SQLite store (~33 ms), for sqlite:/// only
        from plait.adapters.stores.sqlite.store import SqliteStore

        return SqliteStore.open(_path(url), io=io)
    if kind == "jsonl":
        # lazy: the JSONL store and shutil (~27 ms), for jsonl:/// only
        from plait.adapters.stores.jsonl.store import JsonlStore

        return JsonlStore(_path(url))
    if kind == "postgres":
        # lazy: psycopg and the PostgreSQL store (~210 ms), for postgresql:// only
        from plait.adapters.stores.postgres.store import PostgresStore

        # A read command (create=False) must not write: it checks the schema instead of
        # migrating it.
        return PostgresStore(url, migrate=create)
    shown = _shown(url)
    raise ConfigError(f"unknown store URL {shown!r}; {_did_you_mean(url)}{_FORMS}", url=shown)


def _did_you_mean(url: str) -> str:
    """A plain path given where a URL belongs: the URL it probably meant (only for what
    looks like a path: never echo anything else, which may hold a password)."""
    if re.fullmatch(r"[\w./~+-]+", url) is None:
        return ""
    scheme = "jsonl:///" if Path(url).is_dir() else "sqlite:///"
    return f"did you mean {scheme + url!r}? "


def __getattr__(name: str) -> Any:
    # lazy: the backends' classes by name (PEP 562), so importing the package loads none
    # of sqlite3 (~33 ms), psycopg (~210 ms) or the I/O thread
    if name == "MemoryStore":
        from plait.adapters.stores.memory.store import MemoryStore

        return MemoryStore
    if name == "PostgresStore":
        from plait.adapters.stores.postgres.store import PostgresStore

        return PostgresStore
    if name == "PgEventFeed":  # the HTTP API's live events on PostgreSQL (LISTEN)
        from plait.adapters.stores.postgres.feed import PgEventFeed

        return PgEventFeed
    if name == "Offloaded":  # a blocking store's calls moved off the event loop thread
        from plait.adapters.stores.shared.offload import Offloaded

        return Offloaded
    if name == "SqliteStore":
        from plait.adapters.stores.sqlite.store import SqliteStore

        return SqliteStore
    if name in ("JsonlStore", "StoreWarning"):
        from plait.adapters.stores.jsonl import store as jsonl

        return getattr(jsonl, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
