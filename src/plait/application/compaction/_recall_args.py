"""recall's arguments, declared once as a typed model: its precomputed schema
(``_recall_schema.json``) and the value the tool receives both come from it. Imported at
recall's first call (pydantic is not needed to offer the tool)."""

from __future__ import annotations

from pydantic import Field, model_validator

from plait.application.compaction._recall_limits import MAX_SLICE, SCHEMA_FILE
from plait.application.typed_tools import ToolArguments

__all__ = ["MODELS", "SCHEMA_FILE", "RecallArguments"]


class RecallArguments(ToolArguments):
    message_id: str | None = Field(None, min_length=1)
    artifact_id: str | None = Field(None, min_length=1)
    offset: int | None = Field(None, ge=0)
    length: int | None = Field(None, ge=1, le=MAX_SLICE)
    query: str | None = Field(None, min_length=1)
    limit: int | None = Field(None, ge=1, le=50)

    @model_validator(mode="after")
    def _one_source(self) -> RecallArguments:
        given = [self.message_id, self.artifact_id, self.query]
        if sum(value is not None for value in given) != 1:
            raise ValueError("give exactly one of message_id, artifact_id or query")
        return self


MODELS: dict[str, type[ToolArguments]] = {"recall": RecallArguments}
"""recall's arguments model, by tool name (``scripts/tool_schemas.py``)."""
