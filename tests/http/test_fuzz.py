"""Schemathesis against the live server, from its own OpenAPI document, as an attack ran
it (22 findings on an earlier main: 405 without ``Allow``, valid requests rejected, the
event stream's schema): every check, every operation (the event stream included), the
examples, coverage, fuzzing and stateful phases, bounded (examples per operation, one
seed) and on loopback. It must find nothing.

One check is left out: ``ensure_resource_availability`` takes any 404 after a session was
created as "the created resource is missing", but the only such 404 is about the body
(``POST /v1/sessions/{id}/fork`` naming a message that the session does not have).

The server's model declares a context window and prices, as one a service runs with
does: without them a manual compaction is ``token_meter_model_unconfigured`` and a cost
ceiling ``config_error``, both 400s docs/service.md documents for such a server.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait.application.ports import ModelCapabilities
from plait.testing import FunctionModel
from tests.http.conftest import Live, behaviour, serve_live
from tests.pg import empty_database

EXAMPLES = 5
"""Per operation and phase; a run stays around 20 s per store."""
SEED = 20
EXCLUDED = "ensure_resource_availability"

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Live]:
    pg_url: str | None = None
    if request.param == "postgresql":
        pg_url = request.getfixturevalue("pg_url")
        empty_database(pg_url)
    capabilities = ModelCapabilities(
        tool_calls=True,
        structured_output=True,
        context_window=100_000,
        max_output_tokens=4_096,
        price_input_per_mtok=1.0,
        price_output_per_mtok=2.0,
    )
    model = FunctionModel(behaviour, name="behaviour", capabilities=capabilities)
    yield from serve_live(
        tmp_path,
        model=model,
        pg_url=pg_url,
        workspace_root=tmp_path / "ws",
        max_body_bytes=1_000_000,
    )


def test_schemathesis_finds_nothing(served: Live, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-c",
        "from schemathesis.cli import schemathesis; schemathesis()",
        "run",
        f"{served.url}/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {served.keys['alice']}",
        "--checks",
        "all",
        "--exclude-checks",
        EXCLUDED,
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
    done = subprocess.run(  # in tmp_path: the run writes its cache under the working directory
        command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    report = done.stdout[-20_000:] + done.stderr[-5_000:]
    assert done.returncode == 0, report
    selected = re.search(r"Selected: (\d+)/(\d+)", done.stdout)
    tested = re.search(r"Tested: (\d+)", done.stdout)
    assert selected and tested and selected[1] == selected[2] == tested[1], report
    assert int(tested[1]) >= 19, report  # every operation, the event stream included
    cases = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert cases and cases[1] == cases[2] and int(cases[1]) > 100, report
