"""The error of a store used after it was closed, for every backend: its own module so a
store's connection code need not load the shared state's domain types to raise it."""

from __future__ import annotations

from plait.domain.errors import ConfigError

__all__ = ["closed_error"]


def closed_error(store: str) -> ConfigError:
    return ConfigError(f"the {store} store is closed", store=store)
