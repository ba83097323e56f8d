"""What the composition root shares with the service and checks before building it: the
default instructions and the rules a service's configuration must keep. Apart from
:mod:`plait.application.service`, so that opening a runtime checks them (and fails where
it did) without importing the service, which is built at its first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plait.domain.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from plait.application.ports import Tool

__all__ = ["DEFAULT_INSTRUCTIONS", "check_config"]

DEFAULT_INSTRUCTIONS = (
    "You are a careful coding assistant working in the user's workspace. Use the tools to "
    "read before you change anything, keep to the user's constraints, and answer plainly "
    "when the task is done."
)


def check_config(tools: Sequence[Tool], lease_seconds: float) -> None:
    """ConfigError unless the tools' names are unique and ``lease_seconds`` is positive."""
    names = [t.spec.name for t in tools]
    if len(set(names)) != len(names):
        raise ConfigError(f"tool names must be unique, got {names}")
    if lease_seconds <= 0:
        raise ConfigError("lease_seconds must be positive")
