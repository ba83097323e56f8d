"""Compaction (docs/design.md#compaction): budgets, structured summaries, recall of summarized
evidence, post-step pressure and overflow recovery. Raw history is never modified.

The names below are loaded at their first use (PEP 562), so importing one module of the
package (the recall tool a runtime offers when it opens) does not import the others (the
service and the stages, built with the runtime's service at its first use)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plait.application.compaction._context import (
        ContextAssembler,
        ContextView,
        TokenBreakdown,
    )
    from plait.application.compaction._ledger import CountCache, Ledger
    from plait.application.compaction._profiles import ModelProfile, ModelProfiles
    from plait.application.compaction._render import TEMPLATE_VERSION, render_preamble
    from plait.application.compaction._summarizer import Summarizer, merge_bodies
    from plait.application.compaction.recall_offer import RECALL_SPEC, recall_tool
    from plait.application.compaction.service import (
        CompactionOutcome,
        CompactionService,
        CompactionStore,
        RunCompaction,
    )

__all__ = [
    "RECALL_SPEC",
    "TEMPLATE_VERSION",
    "CompactionOutcome",
    "CompactionService",
    "CompactionStore",
    "ContextAssembler",
    "ContextView",
    "CountCache",
    "Ledger",
    "ModelProfile",
    "ModelProfiles",
    "RunCompaction",
    "Summarizer",
    "TokenBreakdown",
    "merge_bodies",
    "recall_tool",
    "render_preamble",
]

_LAZY = {
    "RECALL_SPEC": "recall_offer",
    "TEMPLATE_VERSION": "_render",
    "CompactionOutcome": "service",
    "CompactionService": "service",
    "CompactionStore": "service",
    "ContextAssembler": "_context",
    "ContextView": "_context",
    "CountCache": "_ledger",
    "Ledger": "_ledger",
    "ModelProfile": "_profiles",
    "ModelProfiles": "_profiles",
    "RunCompaction": "service",
    "Summarizer": "_summarizer",
    "TokenBreakdown": "_context",
    "merge_bodies": "_summarizer",
    "recall_tool": "recall_offer",
    "render_preamble": "_render",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # lazy: each name's module at its first use (see the module docstring)
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
