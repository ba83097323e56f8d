"""The durable agent loop (DESIGN §3), shared by send, recovery and resume.

Persistence order of one run::

    save user message (and claim the session for the run)           -- one commit
    -> ask the model; validate; on invalid output ask for a correction (bounded)
    -> save the assistant message with its calls, run usage, execution records -- one commit
    -> per call, in order: [record "started" for side effects] -> execute -> save result
    -> next step, or end the run (completed / budget_exhausted / failed / cancelled)

Every arrow after a save is a restart point. Nothing runs that was not first persisted as
requested, and nothing invalid is persisted as a tool request. No store transaction is
open while the model or a tool works.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from plait.application._run_state import (
    ActiveRun,
    StopRun,
    idempotency_key,
    pending_calls,
    render_rejected,
)
from plait.application.events import (
    MessageSaved,
    ModelCallStarted,
    RunEvent,
    ToolStarted,
)
from plait.application.ports import (
    ArtifactStore,
    Clock,
    Commit,
    IdGenerator,
    ModelClient,
    ModelRequest,
    ModelResponse,
    SessionStore,
    Tool,
    ToolInvocation,
    ToolOutput,
)
from plait.application.validation import check_output
from plait.domain.context import Context, Correction, Prefix
from plait.domain.errors import (
    ConfigError,
    LeaseLostError,
    ModelError,
    PlaitError,
    PolicyError,
    ToolError,
)
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    argument_digest,
)
from plait.domain.runs import Lease, Run, RunError, RunStatus
from plait.domain.session import ExecutionRecord, ExecutionState, StoredMessage
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["RunLoop"]

log = logging.getLogger("plait.agent")


class RunLoop:
    """The loop's machinery over the ports; :class:`AgentService` adds the public API."""

    store: SessionStore
    artifacts: ArtifactStore
    _model: ModelClient | None
    clock: Clock
    ids: IdGenerator
    instructions: str
    owner: str
    lease_seconds: float
    _tools: dict[str, Tool]
    _specs: dict[str, ToolSpec]
    _spec_tuple: tuple[ToolSpec, ...]
    _active: dict[str, ActiveRun]
    _checkpoint: Callable[[str], None] | None

    # --- the loop ---------------------------------------------------------------------------

    @property
    def model(self) -> ModelClient:
        """The model runs use; a service opened without one can still read, cancel and
        resolve, but not run."""
        if self._model is None:
            raise ConfigError(
                "no model chosen: pass --model or set PLAIT_MODEL (e.g. scripted:PATH)"
            )
        return self._model

    def _hit(self, point: str) -> None:
        if self._checkpoint is not None:
            self._checkpoint(point)

    async def _loop(self, a: ActiveRun, *, pending: bool) -> None:
        try:
            if pending:
                await self._run_calls(a, await self._pending_work(a))
            while True:
                calls = await self._step(a)
                if not calls:
                    return
                await self._run_calls(a, calls)
        except StopRun as stop:
            await self._finish(a, stop.status, stop.error, stop.executions)
        except LeaseLostError:
            log.warning("run %s: lease lost to another owner; stopping here", a.run.id)
            raise

    async def _pending_work(self, a: ActiveRun) -> list[tuple[ToolCall, ExecutionRecord]]:
        """Calls of the run's last assistant message that have no result yet, each with
        its execution record."""
        calls = pending_calls(a.history, a.run.id)
        if not calls:
            return []
        records = {r.call_id: r for r in await self.store.get_executions(a.run.id)}
        now = self.clock.now()
        return [(c, records.get(c.id) or self._record(a, c, now)) for c in calls]

    def _check_budget(self, a: ActiveRun, *, before_model_call: bool) -> None:
        if a.cancel_requested:
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled")
        b, u = a.run.budget, a.usage
        if a.deadline is not None and self.clock.monotonic() >= a.deadline:
            raise StopRun(
                RunStatus.BUDGET_EXHAUSTED,
                "deadline",
                f"the run reached its deadline of {b.deadline_seconds:g} s",
            )
        if not before_model_call:
            return
        if b.max_model_calls is not None and u.model_calls >= b.max_model_calls:
            raise StopRun(
                RunStatus.BUDGET_EXHAUSTED,
                "max_model_calls",
                f"the run used its {b.max_model_calls} model calls",
            )
        if b.max_total_tokens is not None and u.total_tokens >= b.max_total_tokens:
            raise StopRun(
                RunStatus.BUDGET_EXHAUSTED,
                "max_total_tokens",
                f"the run used {u.total_tokens} of its {b.max_total_tokens} tokens",
            )

    async def _step(self, a: ActiveRun) -> list[tuple[ToolCall, ExecutionRecord]]:
        """One model turn: ask, validate (with corrections), save. Returns the calls."""
        b = a.run.budget
        if b.max_steps is not None and a.usage.steps >= b.max_steps:
            raise StopRun(
                RunStatus.BUDGET_EXHAUSTED, "max_steps", f"the run took its {b.max_steps} steps"
            )
        step = a.usage.steps + 1
        corrections: list[Correction] = []
        while True:
            self._check_budget(a, before_model_call=True)
            context: Context[AssistantMessage] = Context(
                instructions=self.instructions,
                tools=self._spec_tuple,
                items=Prefix(a.history),
                output_type=AssistantMessage,
                corrections=tuple(corrections),
            )
            self._emit(a, ModelCallStarted(a.run.id, step, len(corrections) + 1))
            response = await self._ask_model(a, context)
            checked = check_output(response, self._specs, a.used_call_ids)
            if checked.ok:
                break
            if len(corrections) >= b.max_corrections:
                raise StopRun(
                    RunStatus.FAILED,
                    "invalid_model_output",
                    f"the model's output was still invalid after {len(corrections)} "
                    f"correction(s): " + "; ".join(checked.problems),
                )
            corrections.append(
                Correction(rejected_text=render_rejected(response), problems=checked.problems)
            )
            a.usage.corrections += 1

        now = self.clock.now()
        calls = checked.calls
        message = AssistantMessage(
            id=self.ids.new("msg"),
            text=response.text,
            created_at=now,
            tool_calls=calls,
            run_id=a.run.id,
            step=step,
            model=response.model or self.model.name,
            usage=response.usage,
            vendor_state=response.vendor_state,
        )
        a.usage.steps = step
        run = replace(a.run, usage=a.usage.freeze())
        if calls:
            run = replace(run, lease=Lease(owner=self.owner, expires_at=now + self.lease_seconds))
        else:
            run = run.ended(RunStatus.COMPLETED, now)
        records = tuple(self._record(a, call, now) for call in calls)
        await self._commit(a, (message,), run=run, executions=records)
        a.used_call_ids.update(c.id for c in calls)
        self._hit("assistant_saved")
        return list(zip(calls, records, strict=True))

    async def _ask_model(self, a: ActiveRun, context: Context[AssistantMessage]) -> ModelResponse:
        request = ModelRequest(role="assistant", context=context)
        a.usage.model_calls += 1
        remaining = None if a.deadline is None else a.deadline - self.clock.monotonic()
        a.interruptible = True
        try:
            async with asyncio.timeout(remaining):
                response = await self.model.complete(request)
        except TimeoutError:
            raise StopRun(
                RunStatus.BUDGET_EXHAUSTED,
                "deadline",
                f"the run reached its deadline of {a.run.budget.deadline_seconds:g} s "
                "while waiting for the model",
            ) from None
        except asyncio.CancelledError:
            self._note_cancel(a)
            raise StopRun(RunStatus.CANCELLED, "cancelled", "the run was cancelled") from None
        except ModelError as e:
            raise StopRun(
                RunStatus.FAILED, e.model_code.lower(), f"model call failed: {e.message}"
            ) from e
        except PlaitError as e:
            raise StopRun(RunStatus.FAILED, e.code, f"model call failed: {e.message}") from e
        except Exception as e:
            log.exception("model %s raised", self.model.name)
            raise StopRun(
                RunStatus.FAILED,
                "model_internal_error",
                f"model call failed: {type(e).__name__}: {e}",
            ) from e
        finally:
            a.interruptible = False
        u = response.usage
        a.usage.input_tokens += u.input_tokens
        a.usage.output_tokens += u.output_tokens
        return response

    def _note_cancel(self, a: ActiveRun) -> None:
        """A CancelledError reached the loop: ours (cancel()) or the caller's task."""
        if not a.cancel_requested:
            a.external_cancel = True
            a.cancel_requested = True
        task = a.task
        if task is not None:
            while task.uncancel():
                pass

    def _record(self, a: ActiveRun, call: ToolCall, now: float) -> ExecutionRecord:
        tool = self._tools.get(call.name)
        if tool is None:
            effect = EffectClass.SIDE_EFFECT
        elif tool.effect_of is not None:
            effect = EffectClass(tool.effect_of(call.arguments()))
        else:
            effect = tool.spec.effect
        return ExecutionRecord(
            session_id=a.session.id,
            run_id=a.run.id,
            call_id=call.id,
            tool_name=call.name,
            effect=effect,
            args_digest=argument_digest(call.arguments_json),
            idempotency_key=idempotency_key(a.session.id, a.run.id, call.id),
            state=ExecutionState.REQUESTED,
            requested_at=now,
        )

    async def _run_calls(
        self, a: ActiveRun, calls: Sequence[tuple[ToolCall, ExecutionRecord]]
    ) -> None:
        for n, (call, record) in enumerate(calls):
            if record.result_status is ToolStatus.UNKNOWN:
                raise StopRun(
                    RunStatus.AWAITING_RESOLUTION,
                    "unknown_effect",
                    f"call {call.id} ({call.name}) has an unknown outcome; resolve it first",
                )
            if record.state is ExecutionState.STARTED and record.effect is EffectClass.SIDE_EFFECT:
                # Started before a crash, result never saved: it may or may not have acted.
                note = (
                    "the process stopped while this call was running; whether its effect "
                    "happened is unknown"
                )
                raise StopRun(
                    RunStatus.AWAITING_RESOLUTION,
                    "unknown_effect",
                    f"call {call.id} ({call.name}): {note}; a person must resolve it",
                    (replace(record, result_status=ToolStatus.UNKNOWN, note=note),),
                )
            try:
                self._check_budget(a, before_model_call=False)
            except StopRun as stop:
                await self._settle_unstarted(a, calls[n:], stop.error.message)
                raise
            await self._execute(a, call, record)
            a.usage.tool_calls += 1

    async def _execute(self, a: ActiveRun, call: ToolCall, record: ExecutionRecord) -> None:
        tool = self._tools.get(call.name)
        if tool is None:
            why = f"tool {call.name!r} is no longer available"
            await self._settle_unstarted(a, [(call, record)], why, ToolStatus.FAILED)
            return
        now = self.clock.now()
        record = replace(record, state=ExecutionState.STARTED, reviewed_at=now, started_at=now)
        if record.effect is EffectClass.SIDE_EFFECT:
            # Only here does "started" change what recovery may do: persist it first.
            await self._commit(a, (), executions=(record,))
            self._hit("execution_started")
        self._emit(a, ToolStarted(a.run.id, call))
        invocation = ToolInvocation(
            call=call,
            session_id=a.session.id,
            run_id=a.run.id,
            workspace=a.session.workspace,
            idempotency_key=record.idempotency_key,
        )
        result = await self._invoke(a, tool, invocation, record.effect)
        self._hit("tool_returned")
        if result.status is ToolStatus.UNKNOWN:
            raise StopRun(
                RunStatus.AWAITING_RESOLUTION,
                "unknown_effect",
                f"call {call.id} ({call.name}): {result.reason}; a person must resolve it",
                (replace(record, result_status=ToolStatus.UNKNOWN, note=result.reason),),
            )
        message = ToolResultMessage(
            id=self.ids.new("msg"),
            tool_name=call.name,
            result=result,
            created_at=self.clock.now(),
            run_id=a.run.id,
            step=a.usage.steps,
        )
        settled = replace(
            record,
            state=ExecutionState.SETTLED,
            settled_at=message.created_at,
            result_status=result.status,
        )
        await self._commit(a, (message,), executions=(settled,))
        self._hit("result_saved")

    async def _invoke(
        self, a: ActiveRun, tool: Tool, invocation: ToolInvocation, effect: EffectClass
    ) -> ToolResult:
        call, b = invocation.call, a.run.budget
        timeout = b.tool_timeout_seconds
        if a.deadline is not None:
            left = max(a.deadline - self.clock.monotonic(), 0.0)
            timeout = left if timeout is None else min(timeout, left)
        unsure = ToolStatus.UNKNOWN if effect is EffectClass.SIDE_EFFECT else ToolStatus.FAILED
        a.interruptible = tool.stoppable
        try:
            async with asyncio.timeout(timeout):
                output = await tool.execute(invocation)
        except TimeoutError:
            reason = f"timed out after {timeout:g} s"
            if unsure is ToolStatus.UNKNOWN:
                reason += "; whether its effect happened is unknown"
            return ToolResult(call_id=call.id, status=unsure, content=reason, reason=reason)
        except asyncio.CancelledError:
            self._note_cancel(a)
            reason = "cancelled while running"
            if unsure is ToolStatus.UNKNOWN:
                reason += "; whether its effect happened is unknown"
            status = unsure if unsure is ToolStatus.UNKNOWN else ToolStatus.CANCELLED
            return ToolResult(call_id=call.id, status=status, content=reason, reason=reason)
        except ToolError as e:
            return ToolResult(
                call_id=call.id, status=ToolStatus.FAILED, content=e.message, reason=e.message
            )
        except PolicyError as e:  # refused before it acted (e.g. plait's own store)
            return ToolResult(
                call_id=call.id, status=ToolStatus.DENIED, content=e.message, reason=e.message
            )
        except PlaitError as e:
            return ToolResult(
                call_id=call.id, status=ToolStatus.FAILED, content=e.message, reason=e.message
            )
        except Exception as e:
            log.exception("tool %s raised", call.name)
            reason = f"internal error in tool {call.name!r}: {type(e).__name__}: {e}"
            return ToolResult(call_id=call.id, status=unsure, content=reason, reason=reason)
        finally:
            a.interruptible = False
        return await self._capped(call, output, b.tool_output_cap_bytes)

    async def _capped(self, call: ToolCall, output: ToolOutput, cap: int) -> ToolResult:
        status = ToolStatus.FAILED if output.failed else ToolStatus.SUCCEEDED
        content = output.content
        if len(content) * 4 <= cap:  # cheap bound before encoding
            return ToolResult(call_id=call.id, status=status, content=content)
        data = content.encode("utf-8", "replace")
        if len(data) <= cap:
            return ToolResult(call_id=call.id, status=status, content=content)
        ref = await self.artifacts.put_artifact(data, media_type=output.media_type)
        notice = (
            f"\n[output truncated: {len(data)} bytes in all, {cap} shown; "
            f"the whole output is artifact {ref.id}]"
        )
        head = data[: max(cap - len(notice.encode()), 0)].decode("utf-8", "ignore")
        return ToolResult(
            call_id=call.id,
            status=status,
            content=head + notice,
            artifact=ref,
            reason=None if status is ToolStatus.SUCCEEDED else "the tool reported failure",
        )

    async def _settle_unstarted(
        self,
        a: ActiveRun,
        calls: Iterable[tuple[ToolCall, ExecutionRecord]],
        why: str,
        status: ToolStatus = ToolStatus.CANCELLED,
    ) -> None:
        """Give every call that never started a ``cancelled`` result, in one commit, so no
        call is left unpaired."""
        now = self.clock.now()
        messages: list[Message] = []
        settled: list[ExecutionRecord] = []
        for call, record in calls:
            if record.result_status is ToolStatus.UNKNOWN:
                result = ToolResult(
                    call_id=call.id,
                    status=ToolStatus.UNKNOWN,
                    content=f"outcome unknown, never resolved: {record.note}",
                    reason=why,
                )
            else:
                result = ToolResult(
                    call_id=call.id, status=status, content=f"not executed: {why}", reason=why
                )
            messages.append(
                ToolResultMessage(
                    id=self.ids.new("msg"),
                    tool_name=call.name,
                    result=result,
                    created_at=now,
                    run_id=a.run.id,
                    step=a.usage.steps,
                )
            )
            settled.append(
                replace(
                    record,
                    state=ExecutionState.SETTLED,
                    settled_at=now,
                    result_status=result.status,
                )
            )
        if messages:
            await self._commit(a, tuple(messages), executions=tuple(settled))

    async def _close_pending(self, a: ActiveRun, *, why: str) -> None:
        """Pair every open call of the run (unknown ones as ``unknown``)."""
        await self._settle_unstarted(a, await self._pending_work(a), why)

    async def _finish(
        self,
        a: ActiveRun,
        status: RunStatus,
        error: RunError | None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        current = replace(a.run, usage=a.usage.freeze())
        if status.terminal:
            run = current.ended(status, self.clock.now(), error)
        else:  # waits for a person: release the lease, keep the session claimed
            run = replace(current, status=status, error=error, lease=None)
        await self._commit(a, (), run=run, executions=executions)

    async def _commit(
        self,
        a: ActiveRun,
        messages: tuple[Message, ...],
        *,
        run: Run | None = None,
        executions: tuple[ExecutionRecord, ...] = (),
    ) -> None:
        result = await self.store.commit(
            Commit(
                session_id=a.session.id,
                expected_version=a.version,
                messages=messages,
                run=run,
                executions=executions,
                lease_owner=self.owner,
            )
        )
        if run is not None:
            a.run = run
        if result.cancel_requested:
            a.cancel_requested = True
        first = a.version + 1
        a.version = result.version
        for n, message in enumerate(messages):
            a.history.append(message)
            stored = StoredMessage(first + n, message)
            a.added.append(stored)
            self._emit(a, MessageSaved(a.run.id, stored))

    def _emit(self, a: ActiveRun, event: RunEvent) -> None:
        if a.observer is None:
            return
        try:
            a.observer(event)
        except Exception:
            log.exception("run observer raised; ignoring")
