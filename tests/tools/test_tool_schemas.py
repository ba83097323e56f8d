"""The built-in tools' schemas are precomputed JSON (so that building the tools imports
neither pydantic nor jsonschema): the argument models stay the one source of truth, and
the JSON must be exactly what they generate (``scripts/tool_schemas.py`` rewrites it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from plait.adapters.tools import SandboxSettings, _specs, command_tools, workspace_tools
from plait.application.arguments import (
    ArgumentSchema,
    cached_schemas,
    check_at_registration,
    known_valid,
)
from plait.application.compaction import RECALL_SPEC, _recall_args
from plait.application.ports import Tool, ToolInvocation, ToolOutput
from plait.application.typed_tools import arguments_schema, schema_cache_text
from plait.domain.errors import ValidationError
from plait.domain.tools import ToolSpec

CACHES = [_specs, _recall_args]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module", CACHES, ids=lambda m: m.__name__)
def test_the_precomputed_schemas_are_what_the_models_generate(module: ModuleType) -> None:
    on_disk = json.loads(module.SCHEMA_FILE.read_text(encoding="utf-8"))
    assert on_disk == {name: arguments_schema(model) for name, model in module.MODELS.items()}
    assert module.SCHEMA_FILE.read_text(encoding="utf-8") == schema_cache_text(module.MODELS)


def test_the_tools_offer_the_schemas_their_models_generate() -> None:
    tools = [
        *workspace_tools(),
        *command_tools(SandboxSettings(test_command="pytest -q")),
    ]
    offered = {tool.spec.name: tool.spec.parameters for tool in tools}
    assert offered == {name: arguments_schema(model) for name, model in _specs.MODELS.items()}
    assert RECALL_SPEC.parameters == arguments_schema(_recall_args.RecallArguments)


@pytest.mark.parametrize("module", CACHES, ids=lambda m: m.__name__)
def test_every_precomputed_schema_is_valid_draft_2020_12(module: ModuleType) -> None:
    # registration skips compiling these: the check happens here instead
    for name, schema in cached_schemas(module.SCHEMA_FILE).items():
        ArgumentSchema(name, schema)


@pytest.mark.slow
def test_the_check_script_fails_on_a_stale_file(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "tool_schemas.py"
    ok = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # a copy of the package with one schema edited by hand: the source tree stays as it is
    copy = tmp_path / "src" / "plait"
    shutil.copytree(ROOT / "src" / "plait", copy, ignore=shutil.ignore_patterns("__pycache__"))
    cached = copy / "adapters" / "tools" / "_schemas.json"
    stale = json.loads(cached.read_text(encoding="utf-8"))
    stale["read_file"]["properties"]["path"]["description"] = "something else"
    cached.write_text(json.dumps(stale, indent=2) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    bad = subprocess.run(
        [sys.executable, str(script), "--check"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert bad.stdout.strip() == "out of date: _schemas.json (run scripts/tool_schemas.py)"
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, env=env)
    assert cached.read_text(encoding="utf-8") == _specs.SCHEMA_FILE.read_text(encoding="utf-8")


async def _nothing(invocation: ToolInvocation) -> ToolOutput:
    return ToolOutput(content="")


def test_a_tool_with_another_schema_is_still_checked_at_registration() -> None:
    bad = {"type": "object", "properties": {"n": {"type": "integr"}}}
    with pytest.raises(ValidationError, match="tool 'mine': invalid parameters schema"):
        Tool(spec=ToolSpec(name="mine", description="", parameters=bad), execute=_nothing)


def test_only_a_schema_marked_known_valid_skips_the_registration_check() -> None:
    # the same bad schema, once marked, passes registration: the mark is what skips it
    bad = {"type": "object", "properties": {"m": {"type": 17}}}
    spec = ToolSpec(name="marked", description="", parameters=bad)
    with pytest.raises(ValidationError):
        check_at_registration(spec)
    known_valid([dict(bad)])
    check_at_registration(spec)
