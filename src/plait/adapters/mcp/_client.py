"""Long-lived MCP client sessions, one per (server, workspace), on a thread of their own.

The SDK's sessions are bound to the event loop they were entered on, while plait's
callers run on whatever loop is current (a CLI command, a worker, a test's loop). So the
sessions live on one background loop owned by :class:`McpManager`; callers await
futures chained to it. Cancelling a caller cancels the call on that loop, and the SDK
then sends MCP's ``notifications/cancelled`` to the server.

Servers start lazily (at the first listing or call), are reused by later calls, are
started again when they died, and are stopped by :meth:`McpManager.close`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any, TextIO, TypeVar, cast

import httpx2
import mcp.types as mcp_types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from plait.adapters.mcp._config import McpServerConfig
from plait.adapters.tools import (
    GitScan,
    config_absent,
    remove_new_config,
    scan_git,
    undo_new_git,
    unmade_text,
)
from plait.adapters.tools.sandbox import (
    SandboxSettings,
    args_data,
    bwrap_argv,
    bwrap_options,
    plan_mounts,
    sandbox_env,
    sandbox_problem,
)
from plait.domain.errors import ToolError
from plait.domain.policy import PLAIT_CONFIG_FILES

__all__ = ["McpCallLost", "McpManager", "McpServerError"]

log = logging.getLogger("plait.mcp")
_T = TypeVar("_T")
_STDERR_TAIL = 2000


class McpServerError(ToolError):
    """An MCP server could not be started, did not answer, or broke the protocol."""

    code = "mcp_server_error"


class McpCallLost(Exception):
    """The server went away while a call was in flight: whether the call took effect is
    not known. Deliberately not a :class:`ToolError`, so the runner settles the call by its
    effect class (``unknown`` for a side effect, ``failed`` otherwise)."""


class _Connection:
    """One running server and its session, on the manager's loop."""

    def __init__(
        self,
        config: McpServerConfig,
        workspace: str,
        launch: _Launch,
        git: GitScan | None = None,
    ) -> None:
        self.config = config
        self.workspace = workspace
        self._launch = launch
        self.git = git
        """The workspace's git places bound read-only in the server's sandbox (``None``:
        git is not protected from this server)."""
        self.session: ClientSession | None = None
        self.tools_changed = False
        self.broken = False
        """A request found the transport closed: start a new process for the next call."""
        self.hidden = frozenset(p for p in launch.protected if os.path.lexists(p))
        """The protected paths that existed (so were hidden) when the sandbox was made."""
        guarded = launch.guarded_config(config)
        self.config_absent = config_absent(workspace, guarded)
        """plait's configuration files that did not exist (so are not bound read-only)
        when the sandbox was made: one that appears makes the server start again."""
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._stderr: TextIO = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115

    @property
    def alive(self) -> bool:
        running = self._task is not None and not self._task.done()
        return running and self.session is not None and not self.broken

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(size - _STDERR_TAIL, 0))
            return self._stderr.read().strip()
        return ""

    async def start(self) -> None:
        self._task = asyncio.create_task(self._main(), name=f"mcp:{self.config.name}")
        try:
            async with asyncio.timeout(self.config.startup_seconds):
                await asyncio.shield(self._ready)
        except TimeoutError:
            error = self._error(f"did not answer within {self.config.startup_seconds:g} s")
            await self.stop()
            raise error from None
        except McpServerError:
            await self.stop()
            raise

    def _error(self, what: str) -> McpServerError:
        tail = self.stderr_tail()
        said = f"; its stderr ends with: {tail[-500:]}" if tail else ""
        return McpServerError(
            f"MCP server {self.config.name!r} {what}{said}", server=self.config.name
        )

    async def _main(self) -> None:
        try:
            async with (
                self._launch(self.config, self.workspace, self._stderr, self.git) as (
                    read,
                    write,
                ),
                ClientSession(read, write, message_handler=self._on_message) as session,
            ):
                await session.initialize()
                self.session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except (Exception, asyncio.CancelledError) as exc:
            if not self._ready.done():
                why = f"did not start ({type(exc).__name__}: {_message(exc)})"
                self._ready.set_exception(self._error(why))
            elif not self._stop.is_set():
                log.warning("MCP server %r stopped: %s", self.config.name, _message(exc))
        finally:
            self.session = None
            if not self._ready.done():
                self._ready.set_exception(self._error("exited before it answered"))

    async def _on_message(self, message: object) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.tools_changed = True

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None and not self._task.done() and self.session is None:
            self._task.cancel()  # still starting: nothing to close gracefully
        if self._task is not None and not self._task.done():
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(self._task)
            except (TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
        # Retrieve a start failure nobody awaited, so asyncio does not log it.
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()
        self._stderr.close()


class _Launch:
    """How a server's transport is opened: stdio inside (or, when configured, outside)
    the sandbox, or streamable HTTP."""

    def __init__(
        self,
        sandbox: SandboxSettings,
        protected: Sequence[str],
        environ: Mapping[str, str],
        protect_git: bool = True,
        protect_config: bool = True,
    ) -> None:
        self.sandbox = sandbox
        self.protected = tuple(protected)
        self.environ = dict(environ)
        self.protect_git = protect_git
        self.protect_config = protect_config

    def guards_git(self, config: McpServerConfig) -> bool:
        """Whether the server runs sandboxed with the workspace's git places read-only
        (as for ``run_command``, unless the policy says ``protect_git = false``)."""
        return self.protect_git and config.command is not None and config.sandbox

    def guarded_config(self, config: McpServerConfig) -> tuple[str, ...]:
        """plait's configuration files the server must not make or change (``()``: none):
        bound read-only where they exist when it starts (the policy's paths), removed after
        a call that made one."""
        guarded = self.protect_config and config.command is not None and config.sandbox
        return PLAIT_CONFIG_FILES if guarded else ()

    @contextlib.asynccontextmanager
    async def __call__(
        self,
        config: McpServerConfig,
        workspace: str,
        errlog: TextIO,
        git: GitScan | None = None,
    ) -> AsyncIterator[tuple[Any, Any]]:
        if config.url is not None:
            headers = config.resolved_headers(self.environ)
            async with (
                httpx2.AsyncClient(headers=headers, timeout=config.timeout_seconds) as http,
                streamable_http_client(config.url, http_client=http) as streams,
            ):
                yield streams[0], streams[1]
            return
        params = self.stdio_params(config, workspace, git)
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams[0], streams[1]

    def stdio_params(
        self, config: McpServerConfig, workspace: str, git: GitScan | None = None
    ) -> StdioServerParameters:
        """The process to start: the server's command, wrapped in bwrap unless the
        config says ``sandbox = false``; ``git``'s places are bound read-only."""
        assert config.command is not None
        root = os.path.realpath(workspace)
        cwd = os.path.realpath(os.path.join(root, config.cwd or "."))
        if not (cwd == root or cwd.startswith(root + "/")):
            raise McpServerError(
                f"MCP server {config.name!r}: cwd {config.cwd!r} leaves the workspace",
                server=config.name,
            )
        env = config.resolved_env(self.environ)
        if not config.sandbox:
            return StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env={**get_default_environment(), **env},
                cwd=cwd,
            )
        problem = sandbox_problem(self.sandbox.bwrap)
        if problem is not None:
            raise McpServerError(
                f"MCP server {config.name!r} cannot run sandboxed: {problem}; or set "
                f"sandbox = false in [mcp.servers.{config.name}] to run it outside the sandbox",
                server=config.name,
            )
        settings = SandboxSettings(
            extra_ro_binds=(*self.sandbox.extra_ro_binds, *config.ro_binds),
            extra_rw_binds=self.sandbox.extra_rw_binds,
            read_only_paths=(*self.sandbox.read_only_paths, *self.guarded_config(config)),
            hidden_paths=self.sandbox.hidden_paths,
            env_allow=self.sandbox.env_allow,
            env_set=self.sandbox.env_set,
            path=self.sandbox.path,
            bwrap=self.sandbox.bwrap,
        )
        mounts = plan_mounts(settings, root, self.protected, git=git.places if git else ())
        inner_env = {**sandbox_env(settings, self.environ), **env}
        # bwrap hands its own environment on; `env -i` makes the server's exactly ours.
        command = [
            "/usr/bin/env",
            "-i",
            *(f"{k}={v}" for k, v in inner_env.items()),
            config.command,
            *config.args,
        ]
        # bwrap's options name hidden paths: they reach it through a file descriptor, never
        # on its command line (readable in /proc/1/cmdline inside the sandbox). The SDK
        # starts the process, so a shell opens the options file as fd 3, removes it, and
        # becomes bwrap.
        options = bwrap_options(settings, mounts, cwd=cwd, network=config.network)
        handle, path = tempfile.mkstemp(prefix="plait-bwrap-", suffix=".args")
        try:
            os.write(handle, args_data(options))
        finally:
            os.close(handle)
        argv = [
            "/bin/sh",
            "-c",
            'exec 3<"$0" && rm -f -- "$0" && exec "$@"',
            path,
            *bwrap_argv(settings, command=command, args_fd=3),
        ]
        return StdioServerParameters(command=argv[0], args=argv[1:], env={}, cwd=root)


ProgressSink = Callable[[str, str, float, "float | None", "str | None"], None]


def _log_progress(
    server: str, tool: str, done: float, total: float | None, message: str | None
) -> None:
    log.info("MCP %s/%s progress %g/%s %s", server, tool, done, total, message or "")


def _connection_lost(error: BaseException) -> bool:
    """Whether the transport closed under a request (the server died or hung up)."""
    if isinstance(error, BaseExceptionGroup):
        return any(_connection_lost(e) for e in error.exceptions)
    return isinstance(error, MCPError) and error.code == mcp_types.CONNECTION_CLOSED


def _new_config(connection: _Connection) -> bool:
    """Whether a configuration file of plait's exists now that the running server's
    sandbox did not bind read-only (made on the host since it started)."""
    return any(
        os.path.lexists(os.path.join(connection.workspace, name))
        for name in connection.config_absent
    )


def _new_git(bound: GitScan | None, now: GitScan | None) -> bool:
    """Whether the workspace has git places a running server's sandbox did not bind."""
    if bound is None or now is None:
        return False
    return bool(set(now.places.items()) - set(bound.places.items()))


def _undone(paths: list[str]) -> str:
    shown = ", ".join(repr(p) for p in paths[:10]) + (" ..." if len(paths) > 10 else "")
    return (
        f"REFUSED: the MCP server made git repositories ({shown}); plait removed them (a "
        "new `.git` is deleted, a new bare repository loses its HEAD): their config and "
        "hooks would run code on the host when git is used here later"
    )


def _message(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _message(error.exceptions[0])
    return str(error) or type(error).__name__


class McpManager:
    """Every configured server's sessions, owned by the runtime and closed with it."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        sandbox: SandboxSettings | None = None,
        protected: Sequence[str] = (),
        environ: Mapping[str, str],
        workspace: str | None = None,
        on_progress: ProgressSink | None = None,
        protect_git: bool = True,
        protect_config: bool = True,
    ) -> None:
        """``on_progress`` receives the servers' progress notifications about calls
        (server, tool, progress, total, message); by default they are logged.
        ``environ``: where ``env_from`` secrets and ``${NAME}`` headers are looked up
        (:attr:`plait.settings.Settings.environ`).

        With ``protect_git`` (the policy's, on by default) a sandboxed stdio server sees
        the workspace's git places (``.git`` and bare repositories, nested ones included)
        read-only, as ``run_command`` does: their config and hooks run code on the host
        later. Git places that appeared since the server started make it start again
        at its next call, and any a call created are undone after it."""
        self.servers = dict(servers)
        self._on_progress = on_progress or _log_progress
        self.default_workspace = os.path.realpath(workspace or os.getcwd())
        self.protect_git = protect_git
        self._launch = _Launch(
            sandbox or SandboxSettings(),
            protected,
            environ,
            protect_git,
            protect_config,
        )
        self._connections: dict[tuple[str, str], _Connection] = {}
        self._starting: dict[tuple[str, str], asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    # --- the background loop ----------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="plait-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())

    async def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on the manager's loop; cancelling the caller cancels it."""
        return await asyncio.wrap_future(self._submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the manager's loop from synchronous code."""
        return self._submit(coro).result()

    # --- on the manager's loop --------------------------------------------------------

    async def _connection(self, server: str, workspace: str | None) -> _Connection:
        config = self.servers.get(server)
        if config is None:
            raise McpServerError(f"no MCP server named {server!r} is configured", server=server)
        real = await asyncio.to_thread(os.path.realpath, workspace or self.default_workspace)
        key = (server, real)
        lock = self._starting.setdefault(key, asyncio.Lock())
        git = None
        if self._launch.guards_git(config):
            git = await asyncio.to_thread(scan_git, real)
        async with lock:
            current = self._connections.get(key)
            new_config = current is not None and _new_config(current)
            if (
                current is not None
                and current.alive
                and not _new_git(current.git, git)
                and not new_config
            ):
                return current
            if current is not None:
                why = "is not running" if not current.alive else "has new git places to protect"
                if current.alive and new_config:
                    why = "has new configuration files of plait's to protect"
                log.info("MCP server %r %s: starting it again", server, why)
                await current.stop()
            connection = _Connection(config, key[1], self._launch, git)
            self._connections[key] = connection
            await connection.start()
            return connection

    async def list_tools(self, server: str, workspace: str | None = None) -> list[mcp_types.Tool]:
        """Every tool the server lists (all pages)."""
        connection = await self._connection(server, workspace)
        session = connection.session
        assert session is not None
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(connection.config.timeout_seconds):
                while True:
                    params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_tools(params=params)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except TimeoutError:
            raise connection._error("did not list its tools in time") from None
        except Exception as exc:
            raise connection._error(f"could not list its tools: {_message(exc)}") from exc
        connection.tools_changed = False
        return tools

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        workspace: str | None,
        meta: dict[str, Any],
        time_limit: float | None,
    ) -> mcp_types.CallToolResult:
        """One ``tools/call``. A server that dies meanwhile raises :class:`McpCallLost`;
        an error the server answers with is a :class:`McpServerError`."""
        connection = await self._connection(server, workspace)
        limit = connection.config.timeout_seconds
        if time_limit is not None:
            limit = min(limit, time_limit)
        absent = connection.config_absent
        try:
            result = await self._call(connection, tool, arguments, meta=meta, limit=limit)
        except BaseException:
            # Whatever the call did, git repositories and configuration files it made are
            # undone (here, on this thread: a cancelled task cannot wait for another).
            if connection.git is not None:
                undo_new_git(connection.workspace, connection.git)
            remove_new_config(connection.workspace, absent)
            raise
        notes: list[str] = []
        if connection.git is not None:
            undone = await asyncio.to_thread(undo_new_git, connection.workspace, connection.git)
            if undone:
                notes.append(_undone(undone))
        made = await asyncio.to_thread(remove_new_config, connection.workspace, absent)
        if made:
            notes.append(f"REFUSED: the call made {unmade_text(made)}")
        if notes:
            texts = [mcp_types.TextContent(type="text", text=note) for note in notes]
            result = result.model_copy(
                update={"content": [*result.content, *texts], "is_error": True}
            )
        return result

    async def _call(
        self,
        connection: _Connection,
        tool: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any],
        limit: float,
    ) -> mcp_types.CallToolResult:
        server = connection.config.name
        session = connection.session
        assert session is not None
        try:

            async def report(progress: float, total: float | None, message: str | None) -> None:
                self._on_progress(server, tool, progress, total, message)

            async with asyncio.timeout(limit):
                result = await session.call_tool(
                    tool,
                    arguments,
                    progress_callback=report,
                    meta=cast(mcp_types.RequestParamsMeta, meta),
                )
        except TimeoutError:
            raise McpCallLost(
                f"MCP server {server!r} did not answer within {limit:g} s (cancellation sent)"
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if _connection_lost(exc) or not connection.alive:
                connection.broken = True
                tail = connection.stderr_tail()[-300:]
                said = f" (its stderr ends with: {tail})" if tail else ""
                raise McpCallLost(f"MCP server {server!r} exited during the call{said}") from exc
            raise McpServerError(
                f"MCP server {server!r} answered {tool!r} with an error: {_message(exc)}",
                server=server,
                tool=tool,
            ) from exc
        return result

    async def _close_all(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            await connection.stop()

    async def _stop_unhidden(self, existing: frozenset[str]) -> int:
        stale = [(key, c) for key, c in self._connections.items() if existing - c.hidden]
        for key, connection in stale:
            del self._connections[key]
            await connection.stop()
        return len(stale)

    def stop_unhidden(self) -> int:
        """Stop the servers started before a protected path (plait's store) existed: a
        sandbox hides only what exists when it is made, so they start again, with the
        store hidden, at their next call. Returns how many were stopped."""
        if self._loop is None:
            return 0
        existing = frozenset(p for p in self._launch.protected if os.path.lexists(p))
        return self.run_sync(self._stop_unhidden(existing))

    def tools_changed(self) -> list[str]:
        """Servers that said their tool list changed since it was last listed."""
        return sorted({c.config.name for c, _ in self._changed()})

    def _changed(self) -> list[tuple[_Connection, str]]:
        return [(c, ws) for (_, ws), c in list(self._connections.items()) if c.tools_changed]

    def changed_places(self) -> list[tuple[str, str]]:
        """(server, workspace) of each running server that said its tool list changed
        since it was last listed (no I/O: the flags its notifications set)."""
        return sorted((c.config.name, ws) for c, ws in self._changed())

    def forget_change(self, server: str, workspace: str) -> None:
        """Stop reporting a change (its new list could not be read)."""
        connection = self._connections.get((server, workspace))
        if connection is not None:
            connection.tools_changed = False

    def close(self) -> None:
        """Stop every server and the loop (idempotent)."""
        with self._guard:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        if not thread.is_alive():
            loop.close()
