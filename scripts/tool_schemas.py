"""Regenerate the built-in tools' precomputed JSON schemas from their argument models
(the one source of truth); ``--check`` only reports the files that are out of date and
fails (tests/tools/test_tool_schemas.py checks the same).

uv run python scripts/tool_schemas.py [--check]
"""

from __future__ import annotations

import sys

from plait.adapters.tools import _specs
from plait.application.compaction import _recall_args
from plait.application.typed_tools import schema_cache_text


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = 0
    for module in (_specs, _recall_args):
        text = schema_cache_text(module.MODELS)
        path = module.SCHEMA_FILE
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale += 1
        if check:
            print(f"out of date: {path.name} (run scripts/tool_schemas.py)")
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.name}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
