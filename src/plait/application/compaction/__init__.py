"""Compaction (DESIGN §8): budgets, structured summaries, recall of summarized evidence,
post-step pressure and overflow recovery. Raw history is never modified."""

from typing import TYPE_CHECKING, Any

from plait.application.compaction._context import ContextAssembler, ContextView, TokenBreakdown
from plait.application.compaction._ledger import CountCache, Ledger
from plait.application.compaction._profiles import ModelProfile, ModelProfiles
from plait.application.compaction._render import TEMPLATE_VERSION, render_preamble
from plait.application.compaction._summarizer import Summarizer, merge_bodies
from plait.application.compaction.service import (
    CompactionOutcome,
    CompactionService,
    CompactionStore,
    RunCompaction,
)

if TYPE_CHECKING:
    from plait.application.compaction.recall import RECALL_SPEC, recall_tool

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


def __getattr__(name: str) -> Any:
    # lazy: the recall tool's typed arguments import pydantic: only when recall is wanted
    if name in ("RECALL_SPEC", "recall_tool"):
        from plait.application.compaction import recall

        return getattr(recall, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
