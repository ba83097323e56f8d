"""Issue 20: code that runs later on the host. A git repository's config (``core.fsmonitor``)
and hooks run when the user's own ``git`` works in the workspace, outside any sandbox. By
default no tool may create or change them, nested and bare repositories included; each
test runs the host's real ``git status`` afterwards and checks the planted command never
ran."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from plait.adapters.tools import session_tools
from plait.domain.errors import PolicyError
from plait.domain.policy import Action, CallFacts, Policy, ToolRule
from plait.domain.policy_toml import parse_policy
from tests.sandbox.conftest import execute, host_git, invocation, planted, tool
from tests.tools.conftest import run_tool

pytestmark = pytest.mark.usefixtures("bwrap", "git_installed")


@pytest.fixture
def parent(tmp_path: Path, ws: Path, home: Path) -> Path:
    """``ws`` sits in a parent repository (the user's project)."""
    assert host_git(home, tmp_path, "init", "-q").returncode == 0
    return tmp_path


def test_git_init_and_core_fsmonitor_in_a_workspace_inside_a_parent_repository(
    ws: Path, parent: Path, home: Path, marker: Path
) -> None:
    command = f"git init -q && git config core.fsmonitor '{planted(marker)}'"
    out = execute(tool(), ws, command=command)
    assert out.failed
    assert "REFUSED: the command made git repositories ('.git')" in out.content
    assert not (ws / ".git").exists()
    host_git(home, ws, "status")
    host_git(home, parent, "status")
    assert not marker.exists()


@pytest.mark.parametrize(
    "command",
    [
        "git -C sub config core.fsmonitor '{planted}'",
        "echo '[core]' >> sub/.git/config; echo 'fsmonitor = {planted}' >> sub/.git/config",
        "rm -rf sub/.git",
        "mv sub/.git sub/old && git init -q sub && git -C sub config core.fsmonitor '{planted}'",
        "mv sub sub2 && git init -q sub && git -C sub config core.fsmonitor '{planted}'",
        "printf '#!/bin/sh\\n{planted}\\n' > sub/.git/hooks/query-watchman",
    ],
)
def test_changing_a_nested_repositorys_config_or_hooks(
    ws: Path, home: Path, marker: Path, command: str
) -> None:
    sub = ws / "sub"
    sub.mkdir()
    assert host_git(home, sub, "init", "-q").returncode == 0
    before = (sub / ".git" / "config").read_text()
    out = execute(tool(), ws, command=command.format(planted=planted(marker)))
    assert out.failed, out.content
    assert (sub / ".git" / "config").read_text() == before
    assert not (sub / ".git" / "hooks" / "query-watchman").exists()
    host_git(home, sub, "status")
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        "git init -q --bare bare && git -C bare config core.fsmonitor '{planted}'",
        "git init -q --bare . && git config core.worktree .. && "
        "git config core.fsmonitor '{planted}'",
        "git init -q --bare evil && git -C evil config core.fsmonitor '{planted}' && "
        "git -C evil config core.worktree .. && echo 'gitdir: evil' > .git",
        "mkdir -p deep/er && cd deep/er && git init -q && git config core.fsmonitor '{planted}'",
        "ln -s src .git",
    ],
)
def test_making_a_repository_in_a_command(ws: Path, home: Path, marker: Path, command: str) -> None:
    out = execute(tool(), ws, command=command.format(planted=planted(marker)))
    assert out.failed, out.content
    assert "REFUSED: the command made git repositories" in out.content
    for where in (ws, ws / "bare", ws / "evil", ws / "deep" / "er"):
        if where.is_dir():
            host_git(home, where, "status")
    assert not marker.exists()
    assert not (ws / ".git").exists() and not (ws / ".git").is_symlink()
    assert not (ws / "HEAD").exists()


def test_git_in_the_sandbox_still_reads_a_repository(ws: Path, home: Path) -> None:
    host_git(home, ws, "init", "-q")
    host_git(home, ws, "add", "-A")
    host_git(home, ws, "commit", "-qm", "first")
    out = execute(tool(), ws, command="git log --oneline && git status --short")
    assert not out.failed, out.content
    assert "first" in out.content
    assert "REFUSED" not in out.content


def test_protect_git_false_lets_commands_make_repositories(ws: Path) -> None:
    policy = parse_policy("version = 1\nprotect_git = false\n")
    assert not policy.protect_git
    out = execute(tool(policy=policy), ws, command="git init -q sub && git -C sub config x.y 1")
    assert not out.failed, out.content
    assert (ws / "sub" / ".git" / "config").exists()


ALLOW_ALL_WRITES = Policy(
    rules=(ToolRule(name="vendor", action=Action.ALLOW, tools=("write_file",), paths=("**",)),)
)


def _write(policy: Policy, ws: Path, path: str, content: str) -> PolicyError:
    tools = {t.spec.name: t for t in session_tools(policy=policy)}
    with pytest.raises(PolicyError) as info:
        run_tool(tools["write_file"], ws, path=path, content=content)
    assert "git repositories' config and hooks run code on the host" in info.value.message
    return info.value


def test_write_file_into_a_nested_repositorys_hooks_allowed_by_a_policy_rule(
    ws: Path, home: Path, marker: Path
) -> None:
    sub = ws / "vendor" / "lib"
    sub.mkdir(parents=True)
    host_git(home, sub, "init", "-q")
    # The user's own setup: a watchman query hook, as git's sample hook suggests.
    hook = sub / ".git" / "hooks" / "query-watchman"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    host_git(home, sub, "config", "core.fsmonitor", ".git/hooks/query-watchman")
    path = "vendor/lib/.git/hooks/query-watchman"
    facts = CallFacts(tool="write_file", read_only=False, paths=(path,))
    assert ALLOW_ALL_WRITES.evaluate(facts).action is Action.ALLOW  # the rule allows it
    _write(ALLOW_ALL_WRITES, ws, path, f"#!/bin/sh\n{planted(marker)}\n")
    _write(ALLOW_ALL_WRITES, ws, "vendor/lib/.git/config", "[core]\nfsmonitor = x\n")
    _write(ALLOW_ALL_WRITES, ws, "vendor/lib/.git/hooks/pre-commit", "#!/bin/sh\n")
    assert hook.read_text() == "#!/bin/sh\nexit 1\n"
    host_git(home, sub, "status")
    assert not marker.exists()


@pytest.mark.parametrize(
    "writes",
    [
        [("x/.git/config", "[core]\nfsmonitor = {planted}\n")],
        [(".git", "gitdir: evil\n")],
        [("evil/HEAD", "ref: refs/heads/main\n"), ("evil/objects/info/x", "")],
        [("evil/objects/info/x", ""), ("evil/HEAD", "ref: refs/heads/main\n")],
        [("evil/commondir", ".\n"), ("evil/HEAD", "ref: refs/heads/main\n")],
    ],
)
def test_write_file_making_a_repository(
    ws: Path, home: Path, marker: Path, writes: list[tuple[str, str]]
) -> None:
    tools = {t.spec.name: t for t in session_tools(policy=ALLOW_ALL_WRITES)}
    *allowed, (last, content) = writes
    for path, text in allowed:
        run_tool(tools["write_file"], ws, path=path, content=text)
    _write(ALLOW_ALL_WRITES, ws, last, content.format(planted=planted(marker)))
    assert not (ws / last).exists()
    assert not (ws / "x" / ".git").exists()
    host_git(home, ws, "status")
    assert not marker.exists()


def test_reading_a_repository_is_still_allowed(ws: Path, home: Path) -> None:
    host_git(home, ws, "init", "-q")
    tools = {t.spec.name: t for t in session_tools()}
    assert "[core]" in run_tool(tools["read_file"], ws, path=".git/config")


def test_an_existing_git_link_does_not_stop_commands(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.git").mkdir()
    (ws / ".git").symlink_to(tmp_path / "elsewhere.git")
    (ws / "src" / ".git").symlink_to("../deploy")
    out = execute(tool(), ws, command="echo ok && ln -sfn ../src src/.git")
    assert out.failed
    assert "ok" in out.content
    assert "REFUSED: the command made git repositories ('src/.git')" in out.content
    assert (ws / ".git").is_symlink()
    assert not (ws / "src" / ".git").is_symlink()


def test_a_cancelled_command_has_its_repositories_undone_too(ws: Path) -> None:
    t = tool()

    async def go() -> None:
        task = asyncio.create_task(
            t.execute(invocation("run_command", ws, command="git init -q sub && sleep 300"))
        )
        for _ in range(600):  # until the repository exists (bounded)
            if (ws / "sub" / ".git" / "HEAD").exists():
                break
            await asyncio.sleep(0.05)
        assert (ws / "sub" / ".git" / "HEAD").exists()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert not (ws / "sub" / ".git").exists()


def test_protect_git_must_be_true_or_false() -> None:
    assert parse_policy("version = 1\n").protect_git
    with pytest.raises(PolicyError, match="line 2: protect_git: must be true or false"):
        parse_policy('version = 1\nprotect_git = "no"\n', "p.toml")
