"""The recall tool as a runtime offers it: its spec, and the tool whose executor loads the
recall module (:mod:`.recall`) at its first call, so that offering recall when a runtime
opens creates none of what answering it needs (issue 27 item 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plait.application.arguments import cached_schemas
from plait.application.compaction._recall_limits import SCHEMA_FILE
from plait.application.ports import Tool
from plait.domain.tools import EffectClass, ToolSpec

if TYPE_CHECKING:
    from plait.application.ports import ToolInvocation, ToolOutput

__all__ = ["RECALL_SPEC", "recall_tool"]

RECALL_SPEC = ToolSpec(
    name="recall",
    description=(
        "Read originals that a summary of this session left out. Give exactly one of: "
        "message_id (returns that raw message, as cited by the summary's source ids and "
        "evidence), artifact_id (returns a byte range of a stored tool output; offset and "
        "length choose it), or query (searches this session's raw history: every word must "
        "occur; exact facts such as files, commands and failing tests come first). A source "
        "that does not exist in this session is reported as missing; one whose content the "
        "retention policy removed is reported as expired."
    ),
    parameters=cached_schemas(SCHEMA_FILE)["recall"],
    effect=EffectClass.READ_ONLY,
)


def recall_tool(store: Any) -> Tool:
    """The recall tool over a store that is a
    :class:`~plait.application.ports.SessionStore`,
    :class:`~plait.application.ports.SummaryStore` and
    :class:`~plait.application.ports.ArtifactStore`."""

    async def execute(invocation: ToolInvocation) -> ToolOutput:
        # lazy: the recall module and the domain it reads (~2 ms), at the first call
        from plait.application.compaction.recall import answer

        return await answer(store, invocation)

    return Tool(spec=RECALL_SPEC, execute=execute)
