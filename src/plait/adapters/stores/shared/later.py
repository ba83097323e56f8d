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
    import system's lock serializes the first import. Given the ``namespace`` (a module's
    ``globals()``) and the ``binding`` it is kept under there, the first read puts the
    module itself in its place: what runs on every step then reads the module directly,
    with no detour through this object."""

    __slots__ = ("_binding", "_name", "_namespace")

    def __init__(
        self, name: str, namespace: dict[str, Any] | None = None, binding: str | None = None
    ) -> None:
        if (namespace is None) != (binding is None):
            raise ValueError("a Later bound into a namespace names its binding")
        self._name = name
        self._namespace = namespace
        self._binding = binding

    def load(self) -> ModuleType:
        """The module, imported now if it is not yet (and put in its place, if bound)."""
        module: ModuleType | None = sys.modules.get(self._name)
        if module is None or getattr(module.__spec__, "_initializing", False):
            # not imported, or being imported by another thread (it is in sys.modules
            # from its first line): the import system waits for that import to finish
            module = importlib.import_module(self._name)
        if self._namespace is not None and self._binding is not None:
            self._namespace[self._binding] = module
        return module

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.load(), attribute)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported at its first use>"
