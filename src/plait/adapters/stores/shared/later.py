"""A module imported at its first use: a store's capability modules (approvals, forks,
retention, service mode, webhooks) and their domain types are not what opening a store
for one run needs, so a process that never uses them does not load them."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

__all__ = ["Later"]


class Later:
    """Stands for the module ``name``: an attribute read imports it (once; later reads
    find it in ``sys.modules``) and returns the module's attribute. Thread-safe: the
    import system's lock serializes the first import."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        module: ModuleType | None = sys.modules.get(self._name)
        if module is None:
            module = importlib.import_module(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported at its first use>"
