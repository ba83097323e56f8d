"""One trace across processes: a run killed with SIGKILL mid-tool and recovered by
another process, both exporting over OTLP/HTTP to a receiver the test starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.telemetry.otlp_receiver import Received, otlp_receiver

REPO = Path(__file__).resolve().parents[2]
TOML = '[telemetry]\nenabled = true\nspan_processor = "simple"\nservice_name = "plait-test"\n'


def proc(command: str, case: Path, receiver: Received) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "XDG_CONFIG_HOME": str(case / "config"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": "x-team=plait",
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    }
    env.pop("OTEL_TRACES_EXPORTER", None)
    env.pop("OTEL_SERVICE_NAME", None)
    return subprocess.run(
        [sys.executable, "-m", "tests.telemetry.traced_proc", command, str(case / "plait.db")],
        cwd=case,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_run_killed_mid_tool_and_recovered_elsewhere_is_one_linked_trace(
    tmp_path: Path,
) -> None:
    (tmp_path / "plait.toml").write_text(TOML)
    with otlp_receiver() as receiver:
        killed = proc("run", tmp_path, receiver)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        first = list(receiver.spans)
        recovered = proc("recover", tmp_path, receiver)
        assert recovered.returncode == 0, recovered.stderr
        spans = list(receiver.spans)
    outcome = json.loads(recovered.stdout.strip().splitlines()[-1])
    assert outcome["status"] == "completed"
    # the killed process exported its finished spans only: the run's root (ended as the
    # run began) and the model call; not its segment (it never ended) nor the tool's
    # (killed inside it)
    assert [s.name for s in first] == ["plait.run", "chat scripted"]
    root, chat = first
    assert root.parent_span_id == ""
    trace_id, root_span_id = root.trace_id, root.span_id
    assert outcome["trace"].split("-")[1:3] == [trace_id, root_span_id]  # stored with the run
    later = spans[len(first) :]
    assert {s.trace_id for s in spans} == {trace_id}  # one trace across both processes
    (segment,) = [s for s in later if s.name == "invoke_agent plait"]
    assert segment.parent_span_id == root_span_id
    assert segment.links == ((trace_id, root_span_id),)
    assert segment.attributes["plait.run.segment"] == "recovered"
    assert segment.attributes["plait.run.status"] == "completed"
    assert segment.attributes["plait.run.id"] == outcome["run"]
    children = {s.name for s in later if s.parent_span_id == segment.span_id}
    assert children == {"recover_run", "chat scripted"}
    # recovery itself: the call that had started (read_only) is run again, under it
    (recovery,) = [s for s in later if s.name == "recover_run"]
    assert recovery.links == ((trace_id, root_span_id),)
    assert recovery.attributes["plait.recovery.pending_calls"] == 1
    assert recovery.attributes["plait.recovery.rerun"] == 1
    assert recovery.attributes["plait.recovery.reexecuted_idempotent"] == 0
    assert recovery.attributes["plait.recovery.settled_unknown"] == 0
    assert recovery.attributes["plait.run.status"] == "running"  # the loop went on
    (tool,) = [s for s in later if s.name == "execute_tool read_note"]
    assert tool.parent_span_id == recovery.span_id
    # the recovered trace keeps its root; the one span id never exported is the killed
    # segment's (the parent of the model call it made)
    exported = {s.span_id for s in spans}
    missing = {s.parent_span_id for s in spans if s.parent_span_id not in exported | {""}}
    assert missing == {chat.parent_span_id}
    assert [s for s in spans if s.parent_span_id == ""] == [root]
    assert {s.service for s in spans} == {"plait-test"}
    assert all(h.get("x-team") == "plait" for h in receiver.headers)  # OTEL_EXPORTER_OTLP_HEADERS
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= receiver.metrics
