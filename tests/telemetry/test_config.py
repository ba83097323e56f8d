"""The [telemetry] table, the OTEL_* variables it defers to, the optional extra, and
nothing from OpenTelemetry imported when telemetry is off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from plait.adapters.telemetry import TelemetrySettings, open_telemetry
from plait.adapters.telemetry._otel import OtelTelemetry
from plait.domain.errors import ConfigError
from plait.runtime import Runtime, configured_telemetry
from plait.settings import resolve_settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_off_by_default_and_defaults() -> None:
    assert TelemetrySettings.from_mapping({}) == TelemetrySettings()
    assert TelemetrySettings().enabled is False
    assert open_telemetry(TelemetrySettings()) is None


def test_the_table_is_read_and_merged(project: Path) -> None:
    (project / "plait.toml").write_text(
        '[telemetry]\nenabled = true\ncapture_content = true\nexporter = "console"\n'
    )
    config = resolve_settings().config
    assert dict(config.telemetry) == {
        "enabled": True,
        "capture_content": True,
        "exporter": "console",
    }
    settings = TelemetrySettings.from_mapping(config.telemetry)
    assert (settings.enabled, settings.capture_content, settings.exporter) == (
        True,
        True,
        "console",
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("enabled = true\nendpoint = 'x'", "unknown key 'endpoint'"),
        ("enabled = 'yes'", "enabled must be a bool"),
        ("enabled = true\nexporter = 'zipkin'", "exporter 'zipkin' is not one of otlp"),
        ("enabled = true\nspan_processor = 'eager'", "span_processor 'eager'"),
    ],
)
def test_a_bad_table_is_an_error_naming_the_file(project: Path, table: str, message: str) -> None:
    (project / "plait.toml").write_text(f"[telemetry]\n{table}\n")
    with pytest.raises(ConfigError) as raised:
        configured_telemetry()
    assert message in raised.value.message
    assert f"{project / 'plait.toml'}: [telemetry]:" in raised.value.message


def test_telemetry_that_is_not_a_table_is_refused(project: Path) -> None:
    (project / "plait.toml").write_text("telemetry = true\n")
    with pytest.raises(ConfigError, match="telemetry must be a table"):
        resolve_settings()


def test_the_standard_variables_win() -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }
    settings = TelemetrySettings.from_mapping({"enabled": True, "exporter": "otlp"}, env)
    assert (settings.exporter, settings.capture_content) == ("none", True)
    with pytest.raises(ConfigError, match="exporter 'jaeger'"):
        TelemetrySettings.from_mapping({"enabled": True}, {"OTEL_TRACES_EXPORTER": "jaeger"})


def test_a_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plait.adapters.telemetry._otel", None)
    with pytest.raises(ConfigError) as raised:
        open_telemetry(TelemetrySettings(enabled=True))
    assert "plait[otel]" in raised.value.message


def test_runtime_open_builds_it_from_the_table_and_close_flushes(project: Path) -> None:
    (project / "plait.toml").write_text("[telemetry]\nenabled = true\nexporter = 'none'\n")
    import asyncio

    async def go() -> None:
        runtime = Runtime.open(db="memory://", store_only=True)
        assert isinstance(runtime.telemetry, OtelTelemetry)
        assert runtime.service.journal.telemetry is runtime.telemetry
        assert runtime.forks is not None and runtime.forks.telemetry is runtime.telemetry
        await runtime.close()

    asyncio.run(go())


OFF_RUN = """
import asyncio, sys
from plait.runtime import Runtime
from plait.testing import ScriptedModel

async def main():
    model = ScriptedModel({"version": 1, "assistant": [{"text": "hi"}]})
    runtime = Runtime.open(db="memory://", model=model)
    session = await runtime.service.create_session()
    result = await runtime.service.send(session.id, "hello")
    assert result.run.status.value == "completed", result.run
    assert result.run.trace_context is None
    await runtime.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


@pytest.mark.slow
def test_off_nothing_from_opentelemetry_is_imported(project: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(project / "cfg")}
    done = subprocess.run(
        [sys.executable, "-c", OFF_RUN],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
