"""Compaction (DESIGN §8): budgets, structured summaries, recall of summarized evidence,
post-step pressure and overflow recovery. Raw history is never modified."""

from plait.application.compaction._context import ContextAssembler, ContextView, TokenBreakdown
from plait.application.compaction._ledger import CountCache, Ledger
from plait.application.compaction._profiles import ModelProfile, ModelProfiles
from plait.application.compaction._render import TEMPLATE_VERSION, render_preamble
from plait.application.compaction._summarizer import Summarizer, merge_bodies
from plait.application.compaction.recall import RECALL_SPEC, recall_tool
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
