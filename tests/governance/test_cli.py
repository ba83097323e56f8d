"""``plait approvals`` and ``plait policy``, in-process, and docs/policy.md's examples."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores import open_store
from plait.domain.errors import ConfigError
from plait.domain.governance import Approval, ApprovalStatus
from plait.domain.policy_toml import parse_policy
from plait.domain.session import Session
from plait.entrypoints.cli.governance import parse_ttl
from plait.entrypoints.cli.main import main

DOC = Path(__file__).parents[2] / "docs" / "policy.md"


class Cli:
    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.db = f"sqlite:///{tmp_path / 'plait.db'}"
        self.capsys = capsys
        self.workspace = tmp_path / "ws"
        self.workspace.mkdir()

    def run(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*argv, "--db", self.db])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *argv: str) -> Any:
        code, out, err = self.run(*argv, "--json")
        assert code == 0, err
        return json.loads(out)

    def seed(self) -> None:
        async def go() -> None:
            store = open_store(self.db)
            try:
                await store.create_session(
                    Session(id="s1", created_at=1.0, workspace=str(self.workspace))
                )
                await store.request_approval(
                    Approval(
                        id="apr1", session_id="s1", run_id="r1", call_id="c1",
                        tool_name="run_command",
                        args_digest="sha256:" + "a" * 64, scope=(), workspace_state=None,
                        requested_at=1_000.0, reason="`rm -rf build` matches no command rule",
                    )
                )  # fmt: skip
            finally:
                await store.close()

        asyncio.run(go())


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path, capsys)


def test_approvals_list(cli: Cli) -> None:
    # Deciding (and continuing the run) is tested over real runs in tests/cli/test_approvals.py.
    cli.seed()
    (listed,) = cli.json("approvals", "list", "--pending")["approvals"]
    assert listed["approval_id"] == "apr1" and listed["status"] == "pending"
    assert "state" not in listed  # one status field (issue 26 item 5)
    code, out, _ = cli.run("approvals", "list")
    assert code == 0 and "apr1  pending" in out and "why: `rm -rf build`" in out
    # an unknown run or session is an error, as everywhere else (issue 26 item 6)
    for flag, unknown, code_name in (
        ("--run", "r2", "run_not_found"),
        ("--session", "ses_nope", "session_not_found"),
    ):
        code, out, err = cli.run("approvals", "list", flag, unknown, "--json")
        assert code == 2 and json.loads(out)["error"]["code"] == code_name, (out, err)
        assert "no approval requests" not in out


def test_ttl_parsing() -> None:
    assert [parse_ttl(t) for t in ("90", "90s", "10m", "2h", "1d")] == [90, 90, 600, 7200, 86400]
    for bad in ("0m", "soon", "-5s"):
        with pytest.raises(ConfigError):
            parse_ttl(bad)


def test_policy_check(cli: Cli, tmp_path: Path) -> None:
    good = tmp_path / "p.toml"
    good.write_text(
        'version = 1\n[[rules]]\nname = "no-deploy"\npaths = ["deploy/**"]\naction = "deny"\n'
    )
    data = cli.json("policy", "check", str(good))
    assert data["rules"] == [
        {
            "name": "no-deploy",
            "action": "deny",
            "tools": ["*"],
            "paths": ["deploy/**"],
            "commands": [],
            "reason": "",
        }
    ]
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n\n[[rules]]\nname = "x"\naction = "alow"\n')
    code, out, _ = cli.run("policy", "check", str(bad), "--json")
    err = json.loads(out)["error"]
    assert code == 2 and err["code"] == "policy_error"
    assert err["details"] == {"source": str(bad), "key": "rules[0].action", "line": 5}
    code, _, stderr = cli.run("policy", "check", str(tmp_path / "missing.toml"))
    assert code == 2 and "does not exist" in stderr


def test_policy_explain(cli: Cli) -> None:
    cli.seed()
    e = cli.json(
        "policy", "explain", "s1", "run_command", '{"command": "cd src && rm -rf ../deploy"}'
    )
    assert (e["action"], e["rule"], e["policy"]) == (
        "approve",
        "defaults.command",
        "built-in default",
    )
    assert e["commands"] == ["cd src", "rm -rf ../deploy"]
    e = cli.json("policy", "explain", "s1", "read_file", '{"path": "../secret"}')
    assert (e["action"], e["rule"], e["effect"]) == ("deny", "workspace", "read_only")
    code, _, err = cli.run("policy", "explain", "s1", "read_file", "[1]")
    assert code == 2 and "must be a JSON object" in err


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_the_documented_policy_file_is_valid_and_behaves_as_described(
    cli: Cli, tmp_path: Path
) -> None:
    (toml,) = _blocks("toml")
    policy = parse_policy(toml, "policy.toml")
    assert [r.name for r in policy.rules] == ["no-deploy", "review-src", "tests"]
    path = tmp_path / "policy.toml"
    path.write_text(toml)
    code, out, _ = cli.run("policy", "check", str(path))
    assert code == 0 and out.startswith(f"policy {path}: valid")
    cli.seed()
    # the explain example, as written in the doc
    console = next(b for b in _blocks("console") if "policy explain" in b)
    lines = console.splitlines()
    command = next(ln for ln in lines if "policy explain" in ln).removeprefix("$ plait ")
    expected = lines[lines.index(next(ln for ln in lines if "policy explain" in ln)) + 1]
    import shlex

    argv = [
        a.replace("policy.toml", str(path)) for a in shlex.split(command.replace("SESSION", "s1"))
    ]
    code, out, _ = cli.run(*argv)
    assert code == 0 and out.strip() == expected.replace("policy.toml", str(path))


def test_documented_reviewer_answer_is_valid() -> None:
    from plait.application.governance.reviewer import parse_decision
    from plait.application.ports import ModelResponse

    (answer,) = _blocks("json")
    decision, problems = parse_decision(ModelResponse(text=answer))
    assert problems == [] and decision is not None and decision["decision"] == "deny"


def test_approval_status_values_are_documented() -> None:
    text = DOC.read_text()
    assert all(s.value in text for s in ApprovalStatus)
