"""plait: a durable, model-agnostic agent backend.

The public API is loaded lazily so ``import plait`` stays fast; provider SDKs are only
imported when a model that needs them is opened.
"""

from __future__ import annotations

# not typing's TYPE_CHECKING: importing typing loads re and enum (10 ms), before the
# plait command can catch a Ctrl-C (see plait.entrypoints.cli)
TYPE_CHECKING = False

__version__ = "0.1.0"

__all__ = [
    "AgentService",
    "EffectClass",
    "PlaitError",
    "Runtime",
    "ToolError",
    "ToolInvocation",
    "ToolOutput",
    "__version__",
    "tool",
]

if TYPE_CHECKING:
    from typing import Any

    from plait.application.ports import ToolInvocation, ToolOutput
    from plait.application.service import AgentService
    from plait.application.typed_tools import tool
    from plait.domain.errors import PlaitError, ToolError
    from plait.domain.tools import EffectClass
    from plait.runtime import Runtime

_LAZY = {
    "AgentService": "plait.application.service",
    "EffectClass": "plait.domain.tools",
    "PlaitError": "plait.domain.errors",
    "Runtime": "plait.runtime",
    "ToolError": "plait.domain.errors",
    "ToolInvocation": "plait.application.ports",
    "ToolOutput": "plait.application.ports",
    "tool": "plait.application.typed_tools",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'plait' has no attribute {name!r}")
    # lazy: importlib (3 modules): `import plait` alone loads nothing it does not need
    import importlib

    from plait._gc import long_lived

    with long_lived():  # the modules it imports live as long as the process
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value
