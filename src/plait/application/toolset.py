"""The tools a service offers, refreshable between steps.

A :class:`ToolSet` is shared by the driver's stages (the model's context, the compaction
stage, the gate's requests, the runner): the driver asks it at the start of each step
whether its :attr:`ToolSet.version` moved and only then takes the new tools. Its source
(MCP servers that said ``notifications/tools/list_changed``) is asked first with a cheap
:meth:`ToolSource.changed`; nothing is listed when nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from plait.application.ports import Tool
from plait.domain.errors import ConfigError
from plait.domain.tools import ToolSpec

__all__ = ["ToolSet", "ToolSource"]


class ToolSource(Protocol):
    """Where some of a tool set's tools come from, and can change (MCP servers)."""

    def owns(self, name: str) -> bool:
        """Whether the tool named ``name`` is one of the source's (as last listed)."""
        ...

    def groups(self) -> tuple[str, ...]:
        """The names a run can choose its tools by (the MCP servers')."""
        ...

    def group_of(self, name: str) -> str | None:
        """The group (server) of the source's tool ``name``; ``None`` for another tool."""
        ...

    def changed(self) -> bool:
        """Whether the source's tools changed since they were last listed (no I/O)."""
        ...

    async def reload(self) -> Sequence[Tool]:
        """The source's whole new list of tools."""
        ...


class ToolSet:
    """The current tools, by name, and their specs; :attr:`version` counts the changes."""

    def __init__(self, tools: Sequence[Tool], source: ToolSource | None = None) -> None:
        self.source = source
        self.version = 0
        self.tools: Mapping[str, Tool] = {}
        self.specs: tuple[ToolSpec, ...] = ()
        self._chosen: dict[tuple[str, ...], tuple[Mapping[str, Tool], dict[str, ToolSpec]]] = {}
        self._set(tools)

    def groups(self) -> tuple[str, ...]:
        return self.source.groups() if self.source is not None else ()

    def chosen(
        self, groups: tuple[str, ...] | None
    ) -> tuple[Mapping[str, Tool], dict[str, ToolSpec]]:
        """The tools (and specs by name) of a run that chose ``groups`` (``None``: all):
        the source's tools of other groups are left out. Kept until the next change."""
        if groups is None or self.source is None:
            return self.tools, {n: t.spec for n, t in self.tools.items()}
        hit = self._chosen.get(groups)
        if hit is None:
            source = self.source
            tools = {
                n: t
                for n, t in self.tools.items()
                if (group := source.group_of(n)) is None or group in groups
            }
            hit = self._chosen[groups] = (tools, {n: t.spec for n, t in tools.items()})
        return hit

    def _set(self, tools: Sequence[Tool]) -> None:
        names = [t.spec.name for t in tools]
        if len(set(names)) != len(names):
            raise ConfigError(f"tool names must be unique, got {names}")
        self.tools = {t.spec.name: t for t in tools}
        self.specs = tuple(t.spec for t in tools)
        self._chosen = {}

    def replace(self, tools: Sequence[Tool]) -> None:
        """Offer ``tools`` from the next step on."""
        self._set(tools)
        self.version += 1

    async def refresh(self) -> int:
        """Take the source's new tools if it says they changed; the version after."""
        source = self.source
        if source is not None and source.changed():
            fixed = [t for name, t in self.tools.items() if not source.owns(name)]
            self.replace([*fixed, *await source.reload()])
        return self.version
