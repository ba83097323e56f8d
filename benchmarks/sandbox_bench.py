"""Cost of the sandbox: run_command overhead per call (sandboxed vs unsandboxed) and the
peak Python memory while a command writes 50 MB. Prints figures; asserts nothing.

    uv run python benchmarks/sandbox_bench.py
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from plait.adapters.tools import SandboxSettings, command_tools
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.domain.messages import ToolCall


def _run(tool: Tool, workspace: str, command: str) -> ToolOutput:
    invocation = ToolInvocation(
        call=ToolCall.create(id="c", name="run_command", arguments={"command": command}),
        session_id="s",
        run_id="r",
        workspace=workspace,
        idempotency_key="k",
    )
    return asyncio.run(tool.execute(invocation))


def _per_call(tool: Tool, workspace: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        _run(tool, workspace, "true")
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    workspace = tempfile.mkdtemp(prefix="plait-bench-")
    (Path(workspace) / "deploy").mkdir()
    sandboxed = command_tools(SandboxSettings(read_only_paths=("deploy/**",)))[0]
    bare = command_tools(SandboxSettings(bwrap="/nonexistent", allow_unsandboxed=True))[0]
    _run(sandboxed, workspace, "true")  # probe and /etc scan, once per process
    for name, tool in (("sandboxed", sandboxed), ("unsandboxed", bare)):
        times = _per_call(tool, workspace, 30)
        print(
            f"run_command 'true' {name:>11}: median {statistics.median(times):6.1f} ms, "
            f"p90 {sorted(times)[26]:6.1f} ms (30 calls)"
        )
    tracemalloc.start()
    started = time.perf_counter()
    out = _run(sandboxed, workspace, "head -c 52428800 /dev/zero | tr '\\0' a")
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    spool = Path(out.spool_path or "")
    print(
        f"50 MB of output: {seconds:.2f} s, peak Python memory {peak / 1024:.0f} KiB, "
        f"content {len(out.content.encode())} B, spool {spool.stat().st_size} B"
    )
    spool.unlink()


if __name__ == "__main__":
    main()
