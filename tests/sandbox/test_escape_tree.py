"""Issue 20: a command that rearranges the workspace tree cannot undo a protection. Moving,
removing or replacing any directory that leads to a write-denied path or to plait's store
fails, and the store's path never shows in what a command can read (``/proc/1/cmdline``).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import re
from pathlib import Path

import pytest

from plait.adapters.stores import open_store, protected_paths
from plait.adapters.tools import SandboxSettings, session_tools
from plait.domain.policy import Action, Policy, ToolRule
from tests.sandbox.conftest import execute, snapshot, tool

pytestmark = pytest.mark.usefixtures("bwrap")

DENY_CONFIG_DEPLOY = Policy(
    rules=(
        ToolRule(
            name="no-deploy",
            action=Action.DENY,
            tools=("write_file", "edit_file", "run_command"),
            paths=("config/deploy/**",),
        ),
    )
)


@pytest.fixture
def config(ws: Path) -> Path:
    deploy = ws / "config" / "deploy"
    deploy.mkdir(parents=True)
    (deploy / "app.yaml").write_text("replicas: 3\n")
    (ws / "config" / "other.yaml").write_text("other\n")
    return deploy


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        # the attack as found
        "mv config config.old && mkdir -p config/deploy && echo PWNED > config/deploy/app.yaml",
        "mv config/deploy config/d2 && mkdir config/deploy && echo PWNED > config/deploy/app.yaml",
        "rm -rf config; mkdir -p config/deploy && echo PWNED > config/deploy/app.yaml",
        "rmdir config/deploy config",
        "mkdir -p x/deploy && echo PWNED > x/deploy/app.yaml && mv -T x config",
        "mkdir -p x && echo PWNED > x/app.yaml && mv -T x config/deploy",
        "mv src src2 && mv config src2/ && mkdir -p config/deploy && "
        "echo PWNED > config/deploy/app.yaml",
    ],
)
def test_renaming_a_parent_undoes_protection(ws: Path, config: Path, command: str) -> None:
    out = execute(tool(policy=DENY_CONFIG_DEPLOY), ws, command=command)
    assert out.failed, out.content
    assert (config / "app.yaml").read_text() == "replicas: 3\n"
    assert "PWNED" not in "".join(str(v) for v in snapshot(ws).values())
    assert "Device or resource busy" in out.content or "Read-only" in out.content


def test_the_rest_of_a_pinned_directory_stays_writable(ws: Path, config: Path) -> None:
    t = tool(policy=DENY_CONFIG_DEPLOY)
    out = execute(t, ws, command="echo new > config/new.yaml && rm config/other.yaml")
    assert not out.failed, out.content
    assert sorted(p.name for p in (ws / "config").iterdir()) == ["deploy", "new.yaml"]


def _close(store: object) -> None:
    closing = getattr(store, "close", None)
    if closing is not None:
        done = closing()
        if inspect.isawaitable(done):
            asyncio.run(done)  # type: ignore[arg-type]


STORES = {  # the store's URL, and a file of the store below data/
    "sqlite": ("sqlite:///{ws}/data/plait.db", "plait.db"),
    "jsonl": ("jsonl:///{ws}/data/store", "store/sessions/ses_x.jsonl"),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, ws: Path) -> tuple[str, str]:
    """A real store kept inside the workspace, under ``data/``: its URL and a file in it."""
    (ws / "data").mkdir()
    url, inner = STORES[request.param]
    url = url.format(ws=ws)
    _close(open_store(url))
    return url, inner


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        # the attack as found: then write_file data2/plait.db (see tests/tools)
        "mv data data2 && echo PWNED > data2/{inner}",
        "mv data data2; mkdir -p data/store/sessions; echo PWNED > data/{inner}",
        "rm -rf data",
        "rm -rf data/*",
        "mv -T src data",
        "mkdir -p x/store/sessions && echo PWNED > x/{inner} && mv -T x data",
    ],
)
def test_renaming_the_store_directory_in_a_command(
    ws: Path, store: tuple[str, str], command: str
) -> None:
    url, inner = store
    tools = {t.spec.name: t for t in session_tools(protected=protected_paths(url))}
    top = inner.split("/")[0]

    def state() -> dict[str, tuple[str, str]]:
        return {k: v for k, v in snapshot(ws / "data").items() if k.startswith(top)}

    before = state()
    out = execute(tools["run_command"], ws, command=command.format(inner=inner))
    assert out.failed, out.content
    assert "Device or resource busy" in out.content
    after = state()
    assert {k: v for k, v in after.items() if k in before} == before
    empty = ("file", hashlib.sha256(b"").hexdigest())  # SQLite sidecars made to be hidden
    assert all(v == empty for k, v in after.items() if k not in before)
    assert not (ws / "data2").exists()
    _close(open_store(url, create=False))


def _proc_text(ws: Path, settings: SandboxSettings | None, protected: list[Path]) -> str:
    """Every process's command line and mount table, as a command sees them."""
    t = tool(settings, protected=protected)
    command = (
        "for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\0' ' ' < $f; echo; done;"
        " echo MOUNTS; cat /proc/self/mountinfo"
    )
    out = execute(t, ws, command=command)
    assert not out.failed, out.content
    return out.content


def test_bwrap_command_line_in_proc_1_cmdline(ws: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "shared-store-7f3e"
    elsewhere.mkdir()
    (elsewhere / "plait.db").write_text("SESSIONS\n")
    (ws / ".plait-4b1d").mkdir()
    (ws / ".plait-4b1d" / "plait.db").write_text("SESSIONS\n")
    apart = tmp_path / "apart-store-9c2a"
    apart.mkdir()
    (apart / "plait.db").write_text("SESSIONS\n")
    settings = SandboxSettings(extra_ro_binds=(str(elsewhere),))
    stores = [elsewhere / "plait.db", ws / ".plait-4b1d" / "plait.db", apart / "plait.db"]
    shown = _proc_text(ws, settings, stores)
    cmdlines, mountinfo = shown.split("\nMOUNTS\n", 1)
    assert "shared-store-7f3e/plait.db" not in cmdlines
    assert ".plait-4b1d" not in cmdlines
    # A store outside everything the sandbox shows is not mounted: its path is nowhere.
    assert "apart-store-9c2a" not in cmdlines + mountinfo
    # Mount points inside what it shows are listed (their names, which `ls` shows anyway).
    assert ".plait-4b1d/plait.db" in mountinfo
    assert "--ro-bind" not in shown
    assert "--tmpfs" not in shown
    assert re.search(r"bwrap --args \d+ -- /bin/sh -c for f in", shown)  # bwrap's own


def test_planting_a_sqlite_journal_beside_the_store(ws: Path) -> None:
    (ws / "data").mkdir()
    url = f"sqlite:///{ws}/data/plait.db"
    _close(open_store(url))
    assert not (ws / "data" / "plait.db-journal").exists()
    tools = {t.spec.name: t for t in session_tools(protected=protected_paths(url))}
    out = execute(tools["run_command"], ws, command="echo PWNED > data/plait.db-journal")
    assert out.failed, out.content
    # An empty one stands in its place (SQLite takes an empty journal for none).
    assert (ws / "data" / "plait.db-journal").read_bytes() == b""
    out = execute(tools["run_command"], ws, command="rm data/plait.db-journal")
    assert out.failed, out.content
    _close(open_store(url, create=False))


def test_write_file_through_a_link_made_after_the_policy_check(ws: Path, config: Path) -> None:
    """The gate saw ``link/app.yaml`` as an ordinary path; by the time the write is made a
    command has turned ``link`` into a link to the denied directory. The file tool checks
    the real path it arrives at against the policy, and refuses."""
    from plait.domain.errors import PolicyError
    from tests.tools.conftest import run_tool

    tools = {t.spec.name: t for t in session_tools(policy=DENY_CONFIG_DEPLOY)}
    out = execute(tools["run_command"], ws, command="ln -s config/deploy link && ln -s config c")
    assert not out.failed, out.content
    for path in ("link/app.yaml", "c/deploy/app.yaml", "c/../config/deploy/new.yaml"):
        with pytest.raises(PolicyError, match="rule 'no-deploy' says deny"):
            run_tool(tools["write_file"], ws, path=path, content="PWNED\n")
    with pytest.raises(PolicyError):
        run_tool(tools["edit_file"], ws, path="link/app.yaml", old_string="3", new_string="9")
    assert (config / "app.yaml").read_text() == "replicas: 3\n"
    assert not (config / "new.yaml").exists()
    run_tool(tools["write_file"], ws, path="c/other.yaml", content="fine\n")
    assert (ws / "config" / "other.yaml").read_text() == "fine\n"
