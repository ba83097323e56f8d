"""``plait demo``: the seed's example, run for real through the same service, store and
tools as any other run, with a scripted model instead of a network one."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from plait.adapters.shapes import message_json, run_json
from plait.domain.runs import RunStatus
from plait.entrypoints.cli import _loop
from plait.entrypoints.cli._render import message_text, run_text

__all__ = ["DEMO_PROJECT", "DEMO_REQUEST", "run_demo", "write_demo_project"]

DEMO_REQUEST = (
    "Find out why this project's tests fail, fix it, and run them again. "
    "Don't change the deployment config and don't delete any files."
)

DEMO_PROJECT = {
    "pyproject.toml": (
        '[project]\nname = "shop"\nversion = "0.1.0"\n\n'
        "[tool.shop]\n# VAT is configured as a percentage, e.g. 20 means 20 %.\n"
        "tax_rate_percent = 20\n"
    ),
    "shop/__init__.py": "",
    "shop/pricing.py": (
        '"""Prices with tax."""\n\n\n'
        "def add_tax(amount: float, rate: float) -> float:\n"
        '    """Return ``amount`` with ``rate`` percent of tax added."""\n'
        "    return round(amount * rate, 2)\n"
    ),
    "tests/__init__.py": "",
    "tests/test_pricing.py": (
        "import unittest\n\nfrom shop.pricing import add_tax\n\n\n"
        "class AddTaxTest(unittest.TestCase):\n"
        "    def test_twenty_percent(self) -> None:\n"
        "        self.assertEqual(add_tax(100, 20), 120.0)\n"
    ),
    "deploy/production.yaml": "replicas: 3\nimage: shop:1.4.2\n",
}


def write_demo_project(root: Path) -> None:
    for rel, text in DEMO_PROJECT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _run_tests(workspace: Path) -> tuple[bool, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return proc.returncode == 0, lines[-1] if lines else ""


def _invocation() -> str:
    """How to call plait again, the way this process was started: ``plait`` when that is
    on PATH, ``uv run plait`` under ``uv run``, else ``python -m plait``."""
    # ``uv run`` puts the project's venv on PATH only for its child, so check it first:
    # a bare ``plait`` found there would not run in the user's own shell.
    if os.environ.get("UV"):  # how this process was started, not a setting
        return "uv run plait"
    on_path = shutil.which("plait")
    if on_path and Path(on_path).resolve() == Path(sys.argv[0]).resolve():
        return "plait"
    return f"{shlex.quote(sys.executable)} -m plait"


def run_demo(*, db: str | None, clean: bool, as_json: bool, model: str | None = None) -> int:
    """The demo scenario; ``model`` (a spec) replaces the scripted model with a real one."""
    # lazy: the runtime and the scripted model (~80 ms) are for the demo only
    from plait.runtime import Runtime, open_model
    from plait.testing.scripted import ScriptedModel

    if model is not None:
        open_model(model)  # a bad spec or a missing API key: said before anything is made
    tmp = Path(tempfile.mkdtemp(prefix="plait-demo-"))
    failed = True
    workspace = tmp / "shop"
    workspace.mkdir()
    write_demo_project(workspace)
    db_url = db or f"sqlite:///{tmp / 'plait.db'}"
    script = resources.files("plait.entrypoints.cli").joinpath("demo_data/script.yaml")
    say = (lambda *_: None) if as_json else print
    try:
        before = _run_tests(workspace)
        say(f"workspace: {workspace}")
        say(f"tests before: {'pass' if before[0] else 'FAIL'} ({before[1]})\n")
        if model is None:
            with resources.as_file(script) as script_path:
                runtime = Runtime.open(db=db_url, model=ScriptedModel.from_file(script_path))
        else:
            runtime = Runtime.open(db=db_url, model=model)

        async def go() -> tuple[object, ...]:
            try:
                session = await runtime.service.create_session(
                    workspace=str(workspace), title="plait demo"
                )
                result = await runtime.service.send(session.id, DEMO_REQUEST)
                return session.id, result
            finally:
                await runtime.close()

        session_id, result = _loop.run(go())
        after = _run_tests(workspace)
        deploy_untouched = (workspace / "deploy/production.yaml").read_text(
            encoding="utf-8"
        ) == DEMO_PROJECT["deploy/production.yaml"]
        run = result.run  # type: ignore[attr-defined]
        messages = result.messages  # type: ignore[attr-defined]
        _report(
            as_json=as_json,
            clean=clean,
            session_id=session_id,
            workspace=workspace,
            db_url=db_url,
            before=before,
            after=after,
            deploy_untouched=deploy_untouched,
            run=run,
            messages=messages,
        )
        ok = run.status is RunStatus.COMPLETED and after[0] and not before[0]
        failed = False
        return 0 if ok else 1
    finally:
        if clean or failed:  # an error leaves nothing behind
            shutil.rmtree(tmp, ignore_errors=True)


def _report(
    *,
    as_json: bool,
    clean: bool,
    session_id: object,
    workspace: Path,
    db_url: str,
    before: tuple[bool, str],
    after: tuple[bool, str],
    deploy_untouched: bool,
    run: Any,
    messages: Any,
) -> None:
    """Print what the demo did, as JSON or as text."""
    if as_json:
        print(
            json.dumps(
                {
                    "session_id": session_id,
                    "workspace": str(workspace),
                    "store": db_url,
                    "tests_before": {"passed": before[0], "summary": before[1]},
                    "tests_after": {"passed": after[0], "summary": after[1]},
                    "deploy_config_untouched": deploy_untouched,
                    "run": run_json(run),
                    "messages": [message_json(message) for message in messages],
                },
                ensure_ascii=False,
                indent=2,
            )
        )
    else:
        for message in messages:
            print(message_text(message))
        print()
        print(run_text(run))
        print(f"\ntests after: {'pass' if after[0] else 'FAIL'} ({after[1]})")
        print(f"deploy config untouched: {deploy_untouched}")
        print(f"\nstored in {db_url}, session {session_id}")
        if clean:
            print("(--clean: the workspace and its store were removed)")
        else:
            print(f"see it again with: {_invocation()} history {session_id} --db {db_url}")
