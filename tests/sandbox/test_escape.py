"""The escape suite: every attempt fails, and nothing outside the workspace changes."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait.adapters.tools import Limits, SandboxSettings
from plait.adapters.tools._proc import PidsCgroup
from tests.sandbox.conftest import SECRET, Run, execute, snapshot, tool

pytestmark = pytest.mark.usefixtures("bwrap")


def stdout_of(content: str) -> str:
    return content.split("--- stdout", 1)[1].split("--- stderr", 1)[0]


@pytest.fixture
def untouched(tmp_path: Path, ws: Path, outside: Path) -> Iterator[None]:
    """Asserts afterwards that nothing beside the workspace changed."""
    before = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("ws")}
    yield
    after = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("ws")}
    assert after == before
    assert not Path("/etc/plait-nonexistent").exists()


@pytest.mark.usefixtures("untouched")
def test_read_etc_shadow(run: Run) -> None:
    host = Path("/etc/shadow").read_text()
    out = run("cat /etc/shadow")
    assert out.failed
    assert "exit code 1" in out.content
    first = host.splitlines()[0]
    assert first not in out.content


@pytest.mark.slow
@pytest.mark.usefixtures("untouched")
def test_read_a_file_outside_and_in_the_host_home(run: Run, outside: Path) -> None:
    home = Path.home() / f".plait-sandbox-test-{secrets.token_hex(4)}"
    home.write_text(SECRET)
    try:
        for path in (outside / "secret.txt", home):
            out = run(f"cat {path}")
            assert out.failed
            assert SECRET.strip() not in out.content
            assert "No such file or directory" in out.content
        assert "No such file" in run(f"ls {Path.home()}").content
    finally:
        home.unlink()


@pytest.mark.slow
@pytest.mark.usefixtures("untouched")
@pytest.mark.parametrize(
    "command",
    [
        "echo pwned > {outside}/secret.txt",
        "echo pwned > {outside}/new.txt",
        "echo pwned > ../outside/secret.txt",
        "mkdir ../outside2",
        "cd .. && touch escaped",
        "echo pwned > /etc/plait-nonexistent",
        "echo pwned > /plait-escape",
        "cp src/main.py {home}/plait-escape",
    ],
)
def test_write_outside(run: Run, outside: Path, command: str) -> None:
    out = run(command.format(outside=outside, home=Path.home()))
    assert out.failed
    assert not Path("/plait-escape").exists()
    assert not (Path.home() / "plait-escape").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("untouched")
def test_write_through_a_planted_symlink(run: Run, ws: Path, outside: Path) -> None:
    (ws / "to-file").symlink_to(outside / "secret.txt")
    (ws / "to-dir").symlink_to(outside)
    for command in (
        "cat to-file",
        "echo pwned > to-file",
        "echo pwned >> to-file",
        "echo pwned > to-dir/new.txt",
        "ls to-dir/",
    ):
        out = run(command)
        assert out.failed, command
        assert SECRET.strip() not in out.content


@pytest.mark.usefixtures("untouched")
def test_symlink_made_inside_leads_nowhere(run: Run, ws: Path) -> None:
    out = run("ln -s /etc/passwd p && echo x >> p")
    assert out.failed
    assert "Read-only file system" in out.content


@pytest.mark.usefixtures("untouched")
def test_hard_links_out_of_the_workspace(run: Run, ws: Path, outside: Path) -> None:
    passwd = Path("/etc/passwd").read_bytes()
    for source in (outside / "secret.txt", Path("/etc/passwd")):
        out = run(f"ln {source} hl")
        assert out.failed
        assert not (ws / "hl").exists()
    assert Path("/etc/passwd").read_bytes() == passwd


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_no_connection_to_loopback(run: Run, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    out = run(f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'")
    assert out.failed
    assert not _accepted(listener)


def test_network_when_the_settings_allow_it(run: Run, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    settings = SandboxSettings(tool_network={"run_command": True})
    out = run(f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'", settings)
    assert not out.failed, out.content
    assert _accepted(listener)


def test_parent_environment_secrets_do_not_leak(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"sk-test-{secrets.token_hex(8)}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key)
    out = run("env; cat /proc/*/environ | tr '\\0' '\\n'; ls /proc")
    assert key not in out.content
    assert "PATH=/usr/local/bin:/usr/bin:/bin" in out.content
    assert "HOME=/tmp" in out.content
    # A PID namespace of its own: only the sandbox's few processes are in /proc.
    visible = [p for p in stdout_of(out.content).split() if p.isdigit()]
    assert 1 <= len(visible) <= 6


def test_environment_allow_list_passes_what_is_named(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAIT_SBX_VISIBLE", "yes-1")
    settings = SandboxSettings(env_allow=("PLAIT_SBX_VISIBLE",), env_set={"FOO": "bar"})
    out = run("echo $PLAIT_SBX_VISIBLE $FOO", settings)
    assert "yes-1 bar" in out.content


def _host_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


def _wait_gone(marker: str) -> list[int]:
    for _ in range(100):  # the PID namespace dies with its init; give the kernel a moment
        left = _host_processes(marker)
        if not left:
            return []
        subprocess.run(["sleep", "0.05"], check=True)
    return _host_processes(marker)


@pytest.mark.slow
def test_sigterm_ignoring_tree_is_killed_at_the_timeout(run: Run) -> None:
    marker = str(900000 + secrets.randbelow(99999))
    command = (
        f"trap '' TERM; (trap '' TERM; sleep {marker} & sleep {marker}) & "
        f"sh -c 'trap \"\" TERM; sleep {marker}' & sleep {marker}"
    )
    out = run(command, timeout_seconds=1)
    assert out.failed
    assert "[ended: timeout" in out.content
    assert "timed out after 1 s" in out.content
    assert _wait_gone(marker) == []


def _process_limit_enforceable() -> None:
    if os.getuid() != 0:
        return
    cg = PidsCgroup.create(8)
    if cg is None:
        msg = "root without a writable pids cgroup: the process limit cannot be enforced"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    asyncio.run(cg.remove())


@pytest.mark.slow
@pytest.mark.usefixtures("untouched")
def test_fork_bomb_is_contained(run: Run) -> None:
    _process_limit_enforceable()
    settings = SandboxSettings(limits=Limits(max_processes=64), timeout_seconds=60)
    marker = str(800000 + secrets.randbelow(99999))
    out = run(f"bomb() {{ sleep {marker} & bomb | bomb & }}; bomb; sleep 2", settings)
    assert "process limit reached" in out.content
    assert _wait_gone(marker) == []
    assert not run("echo still healthy").failed


@pytest.mark.slow
@pytest.mark.usefixtures("untouched")
def test_memory_hog_is_contained(run: Run) -> None:
    settings = SandboxSettings(limits=Limits(address_space_bytes=512 * 1024**2))
    out = run("python3 -c 'b = bytearray(4 * 1024**3); print(len(b))'", settings)
    assert out.failed
    assert "MemoryError" in out.content
    assert "4294967296" not in out.content
    assert not run("python3 -c 'print(len(bytearray(256 * 1024**2)))'").failed


@pytest.mark.slow
def test_cpu_time_limit(run: Run) -> None:
    settings = SandboxSettings(limits=Limits(cpu_seconds=1), timeout_seconds=60)
    out = run("while :; do :; done", settings)
    assert out.failed
    assert "killed by SIGXCPU (CPU time limit reached) [ended: limit" in out.content


@pytest.mark.slow
def test_50_mb_of_output_is_capped_and_kept_whole(ws: Path) -> None:
    size = 50 * 1024 * 1024
    cap = 16_000
    t = tool()
    tracemalloc.start()
    try:
        out = execute(t, ws, cap, command=f"head -c {size} /dev/zero | tr '\\0' a; echo done >&2")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not out.failed
    assert len(out.content.encode()) <= cap - 200  # room for the runner's artifact notice
    assert f"--- stdout ({size} bytes; first " in out.content
    assert peak < 8 * 1024 * 1024  # never held whole in memory
    assert out.spool_path is not None
    spooled = Path(out.spool_path)
    with spooled.open("rb") as f:
        header = f.readline() + f.readline()
        assert header.endswith(f"--- stdout ({size} bytes) ---\n".encode())
        f.seek(len(header) + size)
        assert f.read() == b"\n--- stderr (5 bytes) ---\ndone\n"
        f.seek(len(header))
        assert f.read(size).count(b"a") == size
    assert "done" in execute(t, ws, command="echo done").content


def test_background_processes_do_not_outlive_the_command(run: Run) -> None:
    marker = str(700000 + secrets.randbelow(99999))
    out = run(f"sleep {marker} & echo started")
    assert not out.failed
    assert _wait_gone(marker) == []


def test_no_capabilities_and_no_new_user_namespaces(run: Run, ws: Path) -> None:
    out = run("grep CapEff /proc/self/status; unshare -Ur true; mount -t tmpfs x src")
    assert "CapEff:\t0000000000000000" in out.content
    assert out.failed
    assert (ws / "src" / "main.py").exists()
