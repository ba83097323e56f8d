"""The normal-case cost of ``search_text``: a generated project of Python-like files,
searched through the tool's executor (thread hand-off included) the way a run calls it.

    uv run python benchmarks/search_bench.py [--files 2000] [--lines 200] [--repeat 7]

Prints the median time of each search and the scanned megabytes per second. Run it on
two checkouts to compare implementations (it uses only the public tool API).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from plait.adapters.tools import workspace_tools
from plait.application.ports import ToolInvocation
from plait.domain.messages import ToolCall

_WORDS = [
    "self",
    "value",
    "result",
    "config",
    "path",
    "items",
    "count",
    "name",
    "data",
    "index",
    "error",
]

SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("literal, few hits", {"pattern": "needle_marker"}),
    ("literal, ignore case", {"pattern": "NEEDLE_MARKER", "ignore_case": True}),
    ("regex, few hits", {"pattern": r"needle_\w+\(", "regex": True}),
    ("regex, alternation", {"pattern": r"TODO|FIXME|needle_marker", "regex": True}),
    ("regex, anchored", {"pattern": r"^\s*def needle", "regex": True}),
]


def make_tree(root: Path, files: int, lines: int) -> int:
    rng = random.Random(1)
    size = 0
    for i in range(files):
        d = root / f"pkg{i % 40}"
        d.mkdir(exist_ok=True)
        body = []
        for j in range(lines):
            words = " ".join(rng.choice(_WORDS) for _ in range(6))
            body.append(f"    {rng.choice(_WORDS)} = compute_{j}({words})  # note {i}.{j}")
        if i % 100 == 0:
            body.append("def needle_marker():  # the rare hit")
        text = "\n".join(body) + "\n"
        (d / f"mod{i}.py").write_text(text)
        size += len(text)
    return size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--lines", type=int, default=200)
    p.add_argument("--repeat", type=int, default=7)
    a = p.parse_args()
    tool = next(t for t in workspace_tools() if t.spec.name == "search_text")
    with tempfile.TemporaryDirectory() as tmp:
        size = make_tree(Path(tmp), a.files, a.lines)
        print(f"{a.files} files, {size / 1e6:.1f} MB")
        for label, args in SEARCHES:
            times = []
            for _ in range(a.repeat):
                inv = ToolInvocation(
                    call=ToolCall.create(id="c1", name="search_text", arguments=args),
                    session_id="ses_1",
                    run_id="run_1",
                    workspace=tmp,
                    idempotency_key="k",
                )
                t = time.perf_counter()
                out = asyncio.run(tool.execute(inv)).content
                times.append(time.perf_counter() - t)
            med = statistics.median(times)
            hits = sum(1 for line in out.splitlines() if not line.startswith("["))
            print(f"{label:22} {med * 1000:8.1f} ms  {size / med / 1e6:6.1f} MB/s  {hits} hits")


if __name__ == "__main__":
    main()
