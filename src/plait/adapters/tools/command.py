"""``run_command`` and ``run_tests``: shell commands in the workspace, under bubblewrap.

A result says how the command ended (exit code, signal, timeout, limit), shows the head
and tail of stdout and stderr within the output cap, and, when anything was cut, hands the
whole output over as a spool file (:attr:`ToolOutput.spool_path`) that the runner keeps as
an artifact. Without a usable bubblewrap a command is refused, unless the settings allow
running unsandboxed; such results say ``UNSANDBOXED``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plait.adapters.tools._catalog import SCHEMAS, parse
from plait.adapters.tools._config_files import config_absent, remove_new_config, unmade_text
from plait.adapters.tools.sandbox import (
    SandboxSettings,
    SandboxUnavailableError,
    args_data,
    bwrap_argv,
    bwrap_options,
    plan_mounts,
    refuse_system_workspace,
    sandbox_env,
    sandbox_problem,
    with_policy,
)
from plait.application.ports import Tool
from plait.domain.errors import ToolError
from plait.domain.policy import PLAIT_CONFIG_FILES, Policy
from plait.domain.tools import EffectClass, ToolSpec

if TYPE_CHECKING:
    from plait.adapters.tools._git import GitScan
    from plait.adapters.tools._proc import Capture, Outcome
    from plait.application.ports import ToolInvocation, ToolOutput

__all__ = ["command_tools"]

_SHELL = "/bin/sh"
_HEADER_ROOM = 1000
"""Bytes of the capped content kept for the status lines, the section headers and the
notice the runner appends when it keeps the spooled output as an artifact."""
_NOTICE_ROOM = 200

_SANDBOX_TEXT = (
    " It runs in a sandbox: only the workspace (read-write) and the system directories "
    "(read-only) exist, /tmp is private and empty, there is no network unless configured, "
    "and CPU time, memory and process count are limited. The result gives the exit code "
    "and how the command ended, then stdout and stderr (the middle of long output is "
    "left out; the whole output is kept as an artifact)."
)


def command_tools(
    settings: SandboxSettings | None = None,
    *,
    protected: Sequence[str | os.PathLike[str]] = (),
    policy: Policy | None = None,
) -> list[Tool]:
    """``run_command``, plus ``run_tests`` when ``settings.test_command`` is set.
    ``protected`` names paths (plait's store and artifacts) never visible to a command;
    ``policy``'s write-denied paths are read-only and its read-denied paths hidden. Git
    repositories' config and hooks are out of reach too unless the policy says
    ``protect_git = false``."""
    settings = with_policy(settings or SandboxSettings(), policy)
    protect_git = policy.protect_git if policy is not None else True
    config = PLAIT_CONFIG_FILES if policy is None or policy.protect_config else ()
    if policy is None:  # with a policy, its paths include them (protect_config)
        read_only = tuple(dict.fromkeys((*settings.read_only_paths, *config)))
        settings = dataclasses.replace(settings, read_only_paths=read_only)
    protected_paths = tuple(os.path.abspath(os.fspath(p)) for p in protected)
    runner = _Runner(settings, protected_paths, protect_git, config)

    async def run_command(invocation: ToolInvocation) -> ToolOutput:
        args = parse("run_command", invocation.call.arguments())
        return await runner.run(
            invocation,
            tool="run_command",
            command=args.command,
            cwd=args.cwd,
            seconds=args.timeout_seconds,
        )

    tools = [
        Tool(
            spec=ToolSpec(
                name="run_command",
                description="Run a shell command in the workspace." + _SANDBOX_TEXT,
                parameters=SCHEMAS["run_command"],
                effect=EffectClass.SIDE_EFFECT,
            ),
            execute=run_command,
            effect_of=lambda args: settings.effect_of(str(args.get("command", ""))),
        )
    ]
    test_command = settings.test_command
    if test_command is not None:

        async def run_tests(invocation: ToolInvocation) -> ToolOutput:
            seconds = parse("run_tests", invocation.call.arguments()).timeout_seconds
            return await runner.run(
                invocation, tool="run_tests", command=test_command, cwd=None, seconds=seconds
            )

        tools.append(
            Tool(
                spec=ToolSpec(
                    name="run_tests",
                    description=f"Run the project's tests ({test_command})." + _SANDBOX_TEXT,
                    parameters=SCHEMAS["run_tests"],
                    effect=settings.effect_of(test_command),
                ),
                execute=run_tests,
            )
        )
    return tools


class _Runner:
    def __init__(
        self,
        settings: SandboxSettings,
        protected: tuple[str, ...],
        protect_git: bool,
        config: tuple[str, ...],
    ) -> None:
        self.settings = settings
        self.protected = protected
        self.protect_git = protect_git
        self.config = config
        """plait's configuration files at the workspace root: bound read-only where they
        exist (the policy's paths), removed after the command where it made them."""

    def _timeout(self, value: float | None) -> float:
        settings = self.settings
        if value is None:
            return min(settings.timeout_seconds, settings.max_timeout_seconds)
        if value > settings.max_timeout_seconds:  # the configured maximum: not in the schema
            raise ToolError(
                f"timeout_seconds may be at most {settings.max_timeout_seconds:g} (got {value:g})"
            )
        return float(value)

    async def run(
        self,
        invocation: ToolInvocation,
        *,
        tool: str,
        command: str,
        cwd: str | None,
        seconds: float | None,
    ) -> ToolOutput:
        if invocation.workspace is None:
            raise ToolError("this session has no workspace")
        if "\0" in command:
            raise ToolError("command contains a NUL character")
        wall = self._timeout(seconds)
        root, workdir = await asyncio.to_thread(_workdir, invocation.workspace, cwd)
        problem = await asyncio.to_thread(sandbox_problem, self.settings.bwrap)
        if problem is not None and not self.settings.allow_unsandboxed:
            raise SandboxUnavailableError(
                f"{tool} refused: {problem}. (Running commands without a sandbox needs "
                "allow_unsandboxed = true in the [sandbox] settings; not recommended.)",
                problem=problem,
            )
        # The command's environment is the process's, filtered by [sandbox] env_allow:
        # environment passed through to a subprocess, not configuration.
        env = sandbox_env(self.settings, dict(os.environ))
        shell = [_SHELL, "-c", command]
        # lazy: the git scan and shutil, bz2, lzma (~3 ms of start-up), at the first
        # command, not when the tools are built
        from plait.adapters.tools._git import scan_git, undo_new_git
        from plait.application.ports import ToolOutput  # lazy: a call's output type (~0.7 ms)

        if problem is None:  # before the git scan, which would walk all of it
            refuse_system_workspace(root)
        git: GitScan | None = None
        if self.protect_git:
            git = await asyncio.to_thread(scan_git, root)
        absent = await asyncio.to_thread(config_absent, root, self.config)
        data = None
        if problem is None:
            mounts = await asyncio.to_thread(
                plan_mounts, self.settings, root, self.protected, git=git.places if git else ()
            )
            network = self.settings.network_for(tool)
            data = args_data(bwrap_options(self.settings, mounts, cwd=workdir, network=network))
        budget = max((invocation.output_cap_bytes - _HEADER_ROOM) // 2, 64)
        paths = [_temp("out"), _temp("err")]
        args_fd = -1
        try:
            argv = shell
            if data is not None:
                args_fd = _args_file(data)
                argv = bwrap_argv(self.settings, command=shell, args_fd=args_fd)
            # lazy: the process runner (~2 ms of start-up), at the first command, not
            # when the tools are built
            from plait.adapters.tools._proc import Capture, run_process

            out, err = Capture(paths[0], budget), Capture(paths[1], budget)
            outcome = await run_process(
                argv,
                cwd=workdir,
                env=env,
                limits=self.settings.limits,
                wall_seconds=wall,
                stdout=out,
                stderr=err,
                shell_codes=True,
                pass_fds=(args_fd,) if args_fd >= 0 else (),
            )
            # Sandboxed, the command started well over a clock tick after the scan
            # (bwrap's set-up), so only the directories it changed need listing again.
            undone = []
            if git is not None:
                undone = await asyncio.to_thread(
                    undo_new_git, root, git, incremental=problem is None
                )
            if undone:
                outcome = dataclasses.replace(outcome, notes=(*outcome.notes, _undone(undone)))
            made = await asyncio.to_thread(remove_new_config, root, absent)
            if made:
                outcome = dataclasses.replace(outcome, notes=(*outcome.notes, _unmade(made)))
            text = _render(
                command,
                outcome,
                out,
                err,
                wall,
                sandboxed=problem is None,
                cap=invocation.output_cap_bytes,
            )
            spool = None
            if out.truncated or err.truncated:
                spool = await asyncio.to_thread(_spool, command, out, err)
        except BaseException:
            # Cancelled or failed: the process tree is gone, what it made is undone all
            # the same (here, on this thread: a cancelled task cannot wait for another).
            if git is not None:
                undo_new_git(root, git)
            remove_new_config(root, absent)
            raise
        finally:
            if args_fd >= 0:
                os.close(args_fd)
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        failed = outcome.ended != "exit" or outcome.exit_code != 0 or bool(undone or made)
        return ToolOutput(content=text, failed=failed, spool_path=spool)


def _args_file(data: bytes) -> int:
    """A memory file holding ``data``, positioned at its start, for bwrap's ``--args``
    (bwrap reads it to the end and closes it before anything of the command runs)."""
    fd = os.memfd_create("plait-bwrap-args", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unmade(names: list[str]) -> str:
    return f"REFUSED: the command made {unmade_text(names)}"


def _undone(paths: list[str]) -> str:
    shown = ", ".join(repr(p) for p in paths[:10]) + (" ..." if len(paths) > 10 else "")
    return (
        f"REFUSED: the command made git repositories ({shown}); plait removed them (a new "
        "`.git` is deleted, a new bare repository loses its HEAD): their config and hooks "
        "would run code on the host when git is used here later"
    )


def _temp(kind: str) -> str:
    import tempfile  # lazy: tempfile and shutil (~3 ms), at the first command

    fd, path = tempfile.mkstemp(prefix=f"plait-{kind}-")
    os.close(fd)
    return path


def _workdir(workspace: str, cwd: Any) -> tuple[str, str]:
    """The workspace's real path and the real directory to run in."""
    root = os.path.realpath(workspace)
    if cwd is None:
        return root, root
    if not isinstance(cwd, str) or not cwd or "\0" in cwd:
        raise ToolError(f"cwd must be a directory of the workspace (got {cwd!r})")
    if posixpath.isabs(cwd):
        rel = posixpath.relpath(posixpath.normpath(cwd), root)
    else:
        rel = posixpath.normpath(cwd)
    if rel == ".." or rel.startswith("../"):
        raise ToolError(f"cwd {cwd!r} is outside the workspace")
    real = os.path.realpath(os.path.join(root, rel))
    if not (real == root or real.startswith(root + "/")):
        raise ToolError(f"cwd {cwd!r} leads outside the workspace")
    if not os.path.isdir(real):
        raise ToolError(f"cwd {cwd!r} is not a directory of the workspace")
    return root, real


def _status(outcome: Outcome, seconds: float) -> str:
    if outcome.ended == "timeout":
        line = f"timed out after {seconds:g} s: the command and all its processes were killed"
    elif outcome.ended == "exit":
        line = f"exit code {outcome.exit_code}"
    else:
        line = f"killed by {outcome.signal}"
    if outcome.limit == "cpu":
        line += " (CPU time limit reached)"
    elif outcome.limit == "processes":
        line += " (process limit reached: forks were refused)"
    return f"{line} [ended: {outcome.ended}, {outcome.seconds:.2f} s]"


def _section(name: str, cap: Capture, errors: str) -> str:
    head = cap.head.decode("utf-8", errors)
    if not cap.truncated:
        return f"--- {name} ({cap.size} bytes) ---\n{head}"
    tail = cap.tail.decode("utf-8", errors)
    left_out = cap.size - len(cap.head) - len(cap.tail)
    return (
        f"--- {name} ({cap.size} bytes; first {len(cap.head)} and last {len(cap.tail)} "
        f"shown) ---\n{head}\n[... {left_out} bytes left out ...]\n{tail}"
    )


def _render(
    command: str,
    outcome: Outcome,
    out: Capture,
    err: Capture,
    seconds: float,
    *,
    sandboxed: bool,
    cap: int,
) -> str:
    lines = [] if sandboxed else ["UNSANDBOXED: this command ran without the sandbox."]
    shown = command.encode()[:200].decode("utf-8", "ignore")
    lines += [f"$ {shown}{'...' if len(shown) < len(command) else ''}"]
    lines += [_status(outcome, seconds), *outcome.notes]
    if out.truncated or err.truncated:  # the runner appends where the rest is
        cap -= _NOTICE_ROOM
    # Undecodable bytes shown as U+FFFD take three bytes each; dropping them instead
    # keeps binary output within the cap.
    for errors in ("replace", "ignore"):
        sections = [_section("stdout", out, errors), _section("stderr", err, errors)]
        text = "\n".join([*lines, *sections])
        if len(text.encode()) <= cap:
            break
    return text


def _spool(command: str, out: Capture, err: Capture) -> str:
    """The whole output in one file: stdout then stderr, each under a header."""
    import shutil  # lazy: shutil, bz2, lzma (~3 ms), when output is spooled
    import tempfile  # lazy: tempfile (~2 ms), when output is spooled

    fd, path = tempfile.mkstemp(prefix="plait-output-", suffix=".txt")
    try:
        with os.fdopen(fd, "wb") as spool:
            spool.write(f"$ {command}\n--- stdout ({out.size} bytes) ---\n".encode())
            for name, cap in (("stdout", out), ("stderr", err)):
                if name == "stderr":
                    spool.write(f"\n--- stderr ({err.size} bytes) ---\n".encode())
                with open(cap.path, "rb") as src:
                    shutil.copyfileobj(src, spool, 1 << 20)
    except BaseException:
        os.unlink(path)
        raise
    return path
