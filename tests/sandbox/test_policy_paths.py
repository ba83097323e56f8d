"""Policy path rules hold inside the sandbox: write-denied paths are read-only, read-denied
paths and plait's own store are invisible."""

from __future__ import annotations

from pathlib import Path

import pytest

from plait.adapters.stores import protected_paths
from plait.adapters.tools import SandboxSettings, session_tools
from plait.adapters.tools.sandbox import expand_glob, policy_paths
from plait.domain.errors import ToolError
from plait.domain.policy import Action, Policy, ToolRule
from tests.sandbox.conftest import Run, execute, snapshot, tool

pytestmark = pytest.mark.usefixtures("bwrap")

DENY_DEPLOY = SandboxSettings(read_only_paths=("deploy/**",))


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        "echo x > deploy/app.yaml",
        "echo x >> deploy/app.yaml",
        "sed -i s/3/9/ deploy/app.yaml",
        "cp src/main.py deploy/app.yaml",
        "mv src/main.py deploy/app.yaml",
        "rm deploy/app.yaml",
        "mv deploy/app.yaml src/",
        "touch deploy/new.yaml",
        "mv deploy gone",
        "rm -rf deploy",
        "ln src/main.py deploy/hl",
        "chmod 000 deploy/app.yaml",
    ],
)
def test_write_denied_paths_are_read_only(run: Run, ws: Path, command: str) -> None:
    before = snapshot(ws / "deploy")
    out = run(command, DENY_DEPLOY)
    assert out.failed, out.content
    assert snapshot(ws / "deploy") == before
    assert (ws / "deploy" / "app.yaml").read_text() == "replicas: 3\n"


def test_without_the_rule_the_same_write_works(run: Run, ws: Path) -> None:
    out = run("sed -i s/3/9/ deploy/app.yaml")
    assert not out.failed, out.content
    assert (ws / "deploy" / "app.yaml").read_text() == "replicas: 9\n"


def test_the_rest_of_the_workspace_stays_writable(run: Run, ws: Path) -> None:
    out = run("echo new > src/new.py && cat deploy/app.yaml", DENY_DEPLOY)
    assert not out.failed, out.content
    assert "replicas: 3" in out.content
    assert (ws / "src" / "new.py").read_text() == "new\n"


@pytest.mark.slow
def test_file_globs_bind_each_match(run: Run, ws: Path) -> None:
    (ws / "src" / "a.lock").write_text("a\n")
    (ws / "b.lock").write_text("b\n")
    settings = SandboxSettings(read_only_paths=("**/*.lock",))
    for name in ("src/a.lock", "b.lock"):
        assert run(f"echo x > {name}", settings).failed
    assert (ws / "src" / "a.lock").read_text() == "a\n"
    assert (ws / "b.lock").read_text() == "b\n"
    assert not run("echo x > src/main.py", settings).failed


@pytest.mark.slow
def test_read_denied_paths_are_invisible(run: Run, ws: Path) -> None:
    (ws / "secrets").mkdir()
    (ws / "secrets" / "key.pem").write_text("PRIVATE KEY 42\n")
    (ws / ".env").write_text("TOKEN=abc123\n")
    settings = SandboxSettings(hidden_paths=("secrets/**", ".env"))
    out = run("ls -a secrets; cat secrets/key.pem; cat .env; echo x > secrets/new", settings)
    assert out.failed
    assert "PRIVATE KEY" not in out.content
    assert "abc123" not in out.content
    assert sorted(p.name for p in (ws / "secrets").iterdir()) == ["key.pem"]
    assert "PRIVATE KEY 42" in run("cat secrets/key.pem").content  # the rule did it


@pytest.mark.slow
def test_plaits_store_is_never_visible(ws: Path, tmp_path: Path) -> None:
    store = ws / ".plait"
    store.mkdir()
    (store / "plait.db").write_text("SESSIONS 0451\n")
    elsewhere = tmp_path / "shared"
    (elsewhere / "artifacts").mkdir(parents=True)
    (elsewhere / "artifacts" / "a1").write_text("ARTIFACT 0452\n")
    settings = SandboxSettings(extra_ro_binds=(str(elsewhere),))
    t = tool(settings, protected=[store / "plait.db", elsewhere / "artifacts"])
    out = execute(
        t, ws, command=f"cat .plait/plait.db; cat {elsewhere}/artifacts/a1; ls {elsewhere}"
    )
    assert "0451" not in out.content
    assert "0452" not in out.content
    assert (store / "plait.db").read_text() == "SESSIONS 0451\n"
    shown = execute(tool(settings), ws, command=f"cat {elsewhere}/artifacts/a1")
    assert "ARTIFACT 0452" in shown.content  # without protection the bind shows it


def test_a_workspace_inside_the_store_is_refused(ws: Path) -> None:
    t = tool(protected=[ws.parent])
    with pytest.raises(ToolError, match="workspace lies inside a path the sandbox must hide"):
        execute(t, ws, command="true")


def test_patterns_may_not_leave_the_workspace(ws: Path) -> None:
    t = tool(SandboxSettings(read_only_paths=("../outside/**",)))
    with pytest.raises(ToolError, match="must stay inside the workspace"):
        execute(t, ws, command="true")


@pytest.mark.slow
def test_session_tools_hide_the_store_named_by_its_url(ws: Path) -> None:
    db = ws / "state" / "plait.db"
    db.parent.mkdir()
    db.write_text("SESSIONS 0453\n")
    (ws / "state" / "plait.db-wal").write_text("WAL 0454\n")
    url = f"sqlite:///{db}"
    tools = {t.spec.name: t for t in session_tools(protected=protected_paths(url))}
    out = execute(tools["run_command"], ws, command="cat state/*; cp state/plait.db x")
    assert out.failed
    assert "0453" not in out.content
    assert "0454" not in out.content
    assert not (ws / "x").exists()
    assert db.read_text() == "SESSIONS 0453\n"


DEPLOY_RULES = Policy(
    rules=(
        ToolRule(
            name="no-deploy",
            action=Action.DENY,
            tools=("write_file", "edit_file", "run_command"),
            paths=("deploy/**",),
        ),
        ToolRule(name="no-keys", action=Action.DENY, tools=("*",), paths=("**/*.pem",)),
        ToolRule(name="ask-docs", action=Action.APPROVE, tools=("*",), paths=("docs/**",)),
    )
)


def test_policy_paths_from_a_policy() -> None:
    read_only, hidden = policy_paths(DEPLOY_RULES)
    config = ("plait.toml", "plait-policy.toml")
    assert read_only == (*config, ".git/**", ".env", ".env.*", "deploy/**", "**/*.pem")
    assert hidden == ("**/*.pem",)
    assert policy_paths(Policy(protected_action=Action.APPROVE)) == (config, ())
    assert policy_paths(Policy(protected_action=Action.APPROVE, protect_config=False)) == ((), ())


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        "echo x > deploy/app.yaml",
        "sed -i s/3/9/ deploy/app.yaml",
        "cp src/main.py deploy/app.yaml",
        "mv src/main.py deploy/app.yaml",
    ],
)
def test_a_policy_denying_deploy_writes_holds_in_the_sandbox(ws: Path, command: str) -> None:
    out = execute(tool(policy=DEPLOY_RULES), ws, command=command)
    assert out.failed, out.content
    assert (ws / "deploy" / "app.yaml").read_text() == "replicas: 3\n"
    assert (ws / "src" / "main.py").exists()


@pytest.mark.slow
def test_policy_hides_read_denied_and_leaves_approval_paths_writable(ws: Path) -> None:
    (ws / "src" / "key.pem").write_text("PEM 0455\n")
    (ws / "docs").mkdir()
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / ".env").write_text("TOKEN=1\n")
    t = tool(policy=DEPLOY_RULES)
    out = execute(t, ws, command="cat src/key.pem; echo x > .git/HEAD; echo y >> .env")
    assert out.failed
    assert "0455" not in out.content
    assert (ws / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (ws / ".env").read_text() == "TOKEN=1\n"
    assert not execute(t, ws, command="echo ok > docs/new.md").failed
    assert (ws / "docs" / "new.md").read_text() == "ok\n"


def test_globs_match_like_the_policy_and_only_as_deep_as_they_can(ws: Path) -> None:
    (ws / "a.lock").write_text("")
    (ws / "src" / "b.lock").write_text("")
    root = str(ws.resolve())
    assert expand_glob(root, "*.lock") == [f"{root}/a.lock"]
    assert sorted(expand_glob(root, "**/*.lock")) == [f"{root}/a.lock", f"{root}/src/b.lock"]
    assert expand_glob(root, "src/*.lock") == [f"{root}/src/b.lock"]
    assert expand_glob(root, "deploy/**") == [f"{root}/deploy"]
    assert expand_glob(root, "missing/**") == []
