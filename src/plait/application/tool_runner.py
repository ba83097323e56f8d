"""ToolRunner: executes one approved call with its timeout, cancellation and output cap.

What the model sees is at most ``cap`` bytes; the whole output goes to an artifact. A
tool that spooled its output to a file (:attr:`ToolOutput.spool_path`) has the file moved
into the artifact store by streaming (never read whole into memory) and deleted.

Outcomes never raise: a timeout, a cancellation, a :class:`ToolError` or a crash in the
tool become a ToolResult. A side-effecting call that did not report back has an
``unknown`` outcome (a person must resolve it); any other such call ``failed`` (or
``cancelled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import Callable
from dataclasses import replace

from plait.application._deadlines import within
from plait.application.ports import ArtifactStore, Tool, ToolInvocation, ToolOutput
from plait.domain.errors import PlaitError, PolicyError, SubAgentWaitingError
from plait.domain.messages import ArtifactRef, ToolCall, ToolResult, ToolStatus
from plait.domain.text import printable
from plait.domain.tools import EffectClass

__all__ = ["ToolRunner"]

log = logging.getLogger("plait.agent")


class ToolRunner:
    def __init__(self, artifacts: ArtifactStore) -> None:
        self.artifacts = artifacts

    async def run(
        self,
        tool: Tool,
        invocation: ToolInvocation,
        effect: EffectClass,
        *,
        time_limit: float | None,
        on_cancel: Callable[[], None],
    ) -> ToolResult:
        """Run the call. ``on_cancel`` is called when the call was cancelled (the
        driver's cancel, or the caller's task) before the result is returned."""
        call = invocation.call
        # The tool learns its limit: work it does in a thread must stop there by itself.
        if invocation.time_limit_seconds != time_limit:
            invocation = replace(invocation, time_limit_seconds=time_limit)
        unsure = ToolStatus.UNKNOWN if effect is EffectClass.SIDE_EFFECT else ToolStatus.FAILED
        try:
            output = await within(time_limit, tool.execute(invocation))
        except TimeoutError:
            return _failure(call, unsure, f"timed out after {time_limit:g} s")
        except asyncio.CancelledError:
            on_cancel()
            status = unsure if unsure is ToolStatus.UNKNOWN else ToolStatus.CANCELLED
            return _failure(call, status, "cancelled while running")
        except SubAgentWaitingError:
            raise  # not an outcome: the driver makes the run wait
        except PolicyError as exc:  # refused before it acted (e.g. plait's own store)
            why = printable(exc.message)
            return ToolResult(call_id=call.id, status=ToolStatus.DENIED, content=why, reason=why)
        except PlaitError as exc:  # ToolError and its kin: the tool reports a failure
            why = printable(exc.message)
            return ToolResult(call_id=call.id, status=ToolStatus.FAILED, content=why, reason=why)
        except Exception as exc:
            log.exception("tool %s raised", call.name)
            reason = (
                f"internal error in tool {call.name!r}: {type(exc).__name__}: {printable(str(exc))}"
            )
            return ToolResult(call_id=call.id, status=unsure, content=reason, reason=reason)
        return await self.capped(call, output, invocation.output_cap_bytes)

    async def capped(self, call: ToolCall, output: ToolOutput, cap: int) -> ToolResult:
        """The result the model sees: the output, or its first ``cap`` bytes with a notice
        naming the artifact that holds all of it."""
        status = ToolStatus.FAILED if output.failed else ToolStatus.SUCCEEDED
        reason = None if status is ToolStatus.SUCCEEDED else "the tool reported failure"
        content = _storable(output.content)
        if output.spool_path is not None:
            ref = await self._take_spool(output)
            return _truncated(call, status, reason, content.encode("utf-8", "replace"), cap, ref)
        if len(content) * 4 <= cap:  # cheap bound before encoding
            return ToolResult(call_id=call.id, status=status, content=content)
        data = content.encode("utf-8", "replace")
        if len(data) <= cap:
            return ToolResult(call_id=call.id, status=status, content=content)
        ref = await self.artifacts.put_artifact(data, media_type=output.media_type)
        return _truncated(call, status, reason, data, cap, ref)

    async def _take_spool(self, output: ToolOutput) -> ArtifactRef:
        path = output.spool_path
        assert path is not None
        try:
            return await self.artifacts.put_artifact_file(path, media_type=output.media_type)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(text: str) -> str:
    """A tool's output as text a store can keep: a lone surrogate (a byte a tool decoded
    with ``surrogateescape``) is written as its escape, ``\\udcff``."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _failure(call: ToolCall, status: ToolStatus, reason: str) -> ToolResult:
    if status is ToolStatus.UNKNOWN:
        reason += "; whether its effect happened is unknown"
    return ToolResult(call_id=call.id, status=status, content=reason, reason=reason)


def _truncated(
    call: ToolCall,
    status: ToolStatus,
    reason: str | None,
    head_bytes: bytes,
    cap: int,
    ref: ArtifactRef,
) -> ToolResult:
    def notice(shown: int) -> str:
        return (
            f"\n[output truncated: {ref.size} bytes in all, the first {shown} shown; "
            f"the whole output is artifact {ref.id}]"
        )

    room = max(cap - len(notice(cap).encode()), 0)  # shown <= cap: its notice is no longer
    head = head_bytes[:room].decode("utf-8", "ignore")
    return ToolResult(
        call_id=call.id,
        status=status,
        content=head + notice(len(head.encode())),
        artifact=ref,
        reason=reason,
    )
