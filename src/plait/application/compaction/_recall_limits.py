"""What both sides of recall agree on, in a module of its own so that the tool
(:mod:`.recall`) and its typed arguments (:mod:`._recall_args`) import it, not each other."""

from __future__ import annotations

from pathlib import Path

__all__ = ["MAX_SLICE", "SCHEMA_FILE"]

MAX_SLICE = 32_000
"""The longest slice of an artifact one recall call returns (characters)."""
SCHEMA_FILE = Path(__file__).with_name("_recall_schema.json")
"""recall's schema, precomputed from its arguments model (:mod:`._recall_args`, see
``scripts/tool_schemas.py``) so that offering recall does not import pydantic."""
