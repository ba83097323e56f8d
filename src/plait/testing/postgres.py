"""A throw-away PostgreSQL cluster for tests and benchmarks.

:func:`temporary_cluster` runs ``initdb`` and ``pg_ctl`` (Debian: package ``postgresql``,
binaries under ``/usr/lib/postgresql/*/bin``) in a temporary directory, listening on a
free loopback port only, and removes everything afterwards. PostgreSQL refuses to run as
root, so as root the binaries run as the ``postgres`` user (override with
``PLAIT_PG_OS_USER``). Set ``PLAIT_TEST_PG_URL`` to use an existing server instead.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from plait.domain.record import record

__all__ = ["Cluster", "PostgresUnavailable", "cluster", "find_bin_dir", "temporary_cluster"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries (or no way to run them) on this machine."""


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for found in (os.environ.get("PLAIT_PG_BIN"), *candidates):
        if found and (Path(found) / "pg_ctl").exists():
            return Path(found)
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    raise PostgresUnavailable(
        "no PostgreSQL server binaries found (apt-get install -y postgresql, or set "
        "PLAIT_TEST_PG_URL to a server to use)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    user = os.environ.get("PLAIT_PG_OS_USER", "postgres")
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root and no `runuser` to drop to " + user)
    return [runuser, "-u", user, "--", *cmd]


def _chown(path: Path) -> None:
    if os.geteuid() != 0:
        return
    user = os.environ.get("PLAIT_PG_OS_USER", "postgres")
    shutil.chown(path, user=user)


@record
class Cluster:
    """A running throw-away cluster: its URL, and ways to stop and start it (faults for
    tests and the chaos benchmark; see :func:`cluster`)."""

    url: str
    port: int
    bin_dir: Path
    data: Path
    log: Path
    opts: str

    def _ctl(self, *args: str) -> None:
        try:
            _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), *args])
        except PostgresUnavailable as exc:
            with contextlib.suppress(OSError):
                exc.args = (f"{exc}\nserver log:\n{self.log.read_text()[-2000:]}",)
            raise

    def stop(self, mode: str = "immediate") -> None:
        """``pg_ctl stop -m MODE``: ``immediate`` is a crash (no shutdown checkpoint,
        connections cut; the next start replays the WAL)."""
        self._ctl("-m", mode, "-w", "stop")

    def start(self) -> None:
        """``pg_ctl start``, tried again for a few seconds: after an immediate stop the
        old server's processes may still hold its shared memory for a moment, and the new
        postmaster then refuses to start. A start that reports failure while a server of
        this data directory runs after all (still replaying its WAL) is waited for."""
        for attempt in range(50):
            try:
                self._ctl("-l", str(self.log), "-o", self.opts, "-w", "-t", "60", "start")
                return
            except PostgresUnavailable:
                if self._comes_up(timeout=60.0):
                    return
                if attempt == 49:
                    raise
                time.sleep(0.2)

    def _comes_up(self, *, timeout: float) -> bool:
        """Whether a server runs on this data directory and accepts connections within
        ``timeout`` seconds."""
        status = subprocess.run(
            _as_user([str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "status"]),
            capture_output=True,
            check=False,
        )
        if status.returncode != 0:
            return False
        deadline = time.monotonic() + timeout
        ready = [str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
        while time.monotonic() < deadline:
            if subprocess.run(ready, capture_output=True, check=False).returncode == 0:
                return True
            time.sleep(0.1)
        return False

    def restart(self, mode: str = "immediate") -> None:
        """As ``pg_ctl restart -m MODE``: stop, then start (see :meth:`start`)."""
        self.stop(mode)
        self.start()


@contextlib.contextmanager
def temporary_cluster(
    *, fsync: bool = False, max_connections: int = 100, settings: Sequence[str] = ()
) -> Iterator[str]:
    """Start a fresh cluster; yields its URL (``postgresql://plait@127.0.0.1:PORT/plait``).

    ``fsync=False`` is for tests (the data is thrown away); benchmarks pass True.
    ``settings``: more server settings, ``name=value`` each (e.g.
    ``shared_preload_libraries=pg_stat_statements``).
    """
    with cluster(fsync=fsync, max_connections=max_connections, settings=settings) as running:
        yield running.url


@contextlib.contextmanager
def cluster(
    *, fsync: bool = False, max_connections: int = 100, settings: Sequence[str] = ()
) -> Iterator[Cluster]:
    """As :func:`temporary_cluster`, yielding a :class:`Cluster` the caller may stop,
    start and restart (on the same port and data)."""
    bin_dir = find_bin_dir()
    root = Path(tempfile.mkdtemp(prefix="plait-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    for path in (root, sock):
        _chown(path)
    port = _free_port()
    try:
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "plait",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ]
        )
        opts = (
            f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sock} "
            f"-c fsync={'on' if fsync else 'off'} -c max_connections={max_connections} "
            f"-c synchronous_commit={'on' if fsync else 'off'} "
            f"-c full_page_writes={'on' if fsync else 'off'}"
        )
        opts += "".join(f" -c {setting}" for setting in settings)
        url = f"postgresql://plait@127.0.0.1:{port}/plait"
        running = Cluster(
            url=url, port=port, bin_dir=bin_dir, data=data, log=root / "server.log", opts=opts
        )
        running.start()
        try:
            _run(
                [
                    str(bin_dir / "createdb"),
                    "-h",
                    str(sock),
                    "-p",
                    str(port),
                    "-U",
                    "plait",
                    "plait",
                ]
            )
            yield running
        finally:
            _run(
                [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                check=False,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(cmd: list[str], *, check: bool = True) -> None:
    proc = subprocess.run(_as_user(cmd), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise PostgresUnavailable(
            f"{Path(cmd[0]).name} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
