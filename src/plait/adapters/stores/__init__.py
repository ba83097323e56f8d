"""Store adapters: one class per backend, each implementing both
:class:`~plait.application.ports.SessionStore` and
:class:`~plait.application.ports.ArtifactStore`.

=====================  ===============================================================
``memory://``          :class:`~plait.adapters.stores.memory.MemoryStore` (tests, demos)
``sqlite:///PATH``     :class:`~plait.adapters.stores.sqlite.SqliteStore` (the default)
``jsonl:///DIR``       :class:`~plait.adapters.stores.jsonl.JsonlStore` (inspection)
``postgresql://...``   :class:`~plait.adapters.stores.postgres.PostgresStore` (service
                       mode: many processes and machines; libpq URL syntax)
=====================  ===============================================================

As in SQLAlchemy, everything after the third slash is the path: ``sqlite:///plait.db`` is
relative to the working directory, ``sqlite:////var/lib/plait.db`` is absolute.

Backends are imported lazily so ``import plait`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from plait.application.ports import ArtifactStore, SessionStore
from plait.domain.errors import ConfigError

if TYPE_CHECKING:
    from plait.adapters.stores.jsonl import JsonlStore, StoreWarning
    from plait.adapters.stores.memory import MemoryStore
    from plait.adapters.stores.postgres import PostgresStore
    from plait.adapters.stores.sqlite import SqliteStore

__all__ = [
    "JsonlStore",
    "MemoryStore",
    "PostgresStore",
    "SqliteStore",
    "Store",
    "StoreWarning",
    "open_store",
]

_FORMS = (
    "accepted store URLs: 'memory://', 'sqlite:///relative/path.db' or "
    "'sqlite:////absolute/path.db', 'jsonl:///relative/dir', 'jsonl:////absolute/dir' or "
    "'postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME'"
)


class Store(SessionStore, ArtifactStore, Protocol):
    """What every store adapter is: a session store and an artifact store in one."""


def _path(url: str, scheme: str) -> Path:
    rest = url[len(scheme) :]
    if not rest or "?" in rest or "#" in rest or rest.startswith(("\x00",)):
        raise ConfigError(f"store URL {url!r} has no usable path; {_FORMS}", url=url)
    return Path(rest)


def open_store(url: str) -> Store:
    """Open the store named by ``url``. Unknown forms raise
    :class:`~plait.domain.errors.ConfigError` listing the accepted ones."""
    if not isinstance(url, str):
        raise ConfigError(f"store URL must be a string; {_FORMS}")
    if url in ("memory://", "memory:"):
        from plait.adapters.stores.memory import MemoryStore

        return MemoryStore()
    if url.startswith("sqlite:///"):
        from plait.adapters.stores.sqlite import SqliteStore

        return SqliteStore.open(_path(url, "sqlite:///"))
    if url.startswith("jsonl:///"):
        from plait.adapters.stores.jsonl import JsonlStore

        return JsonlStore(_path(url, "jsonl:///"))
    if url.startswith(("postgresql://", "postgres://")):
        from plait.adapters.stores.postgres import PostgresStore

        return PostgresStore(url)
    raise ConfigError(f"unknown store URL {url!r}; {_FORMS}", url=url)


def __getattr__(name: str) -> Any:
    if name == "MemoryStore":
        from plait.adapters.stores.memory import MemoryStore

        return MemoryStore
    if name == "PostgresStore":
        from plait.adapters.stores.postgres import PostgresStore

        return PostgresStore
    if name == "SqliteStore":
        from plait.adapters.stores.sqlite import SqliteStore

        return SqliteStore
    if name in ("JsonlStore", "StoreWarning"):
        from plait.adapters.stores import jsonl

        return getattr(jsonl, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
