"""Delegation to a sub-agent: one tool call of the parent run, one durable child run.

The child's session and run ids derive from the call's idempotency key
(:func:`~plait.domain.subagents.child_ids`), and the tool is ``idempotent``: recovery of a
parent whose process died during the call executes it again with the same key, which
finds the child instead of starting a second one. A child that finished gives its answer
at once; one still ``running`` (its process died with the parent's) is taken over and
continued first. Either way the parent's call is never marked ``unknown``.

The child's budget is its share, capped by what the parent has left (model calls, tokens,
time); when it ends, its model calls and tokens are charged to the parent run. A cancel
of the parent reaches the child: the child runs in the parent call's task, so the same
cancellation ends it ``cancelled``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from plait.application.model_caller import ModelCaller, cost_usd
from plait.application.ports import SessionStore, Tool, ToolInvocation, ToolOutput
from plait.domain.errors import (
    ConfigError,
    RunNotFoundError,
    SessionNotFoundError,
    SubAgentWaitingError,
    ToolError,
)
from plait.domain.governance import Approval
from plait.domain.messages import AssistantMessage
from plait.domain.runs import Budget, Run, RunStatus
from plait.domain.session import Session
from plait.domain.subagents import ParentCall, SubAgent, child_ids
from plait.domain.tools import EffectClass, ToolSpec

if TYPE_CHECKING:
    from plait.application.driver import RunDriver
    from plait.application.fork import ForkService
    from plait.application.service import AgentService

__all__ = ["Delegation", "parent_calls", "sub_agent_sessions"]

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "description": "what the sub-agent must do"}
    },
    "required": ["task"],
    "additionalProperties": False,
}


class Delegation:
    """The tool through which a parent run delegates to ``agent``, whose runs ``child``
    drives. ``parent``: the driver of the parent's runs (set by the composition root once
    it is built), charged with the child's usage."""

    def __init__(
        self, agent: SubAgent, child: AgentService, forks: ForkService | None = None
    ) -> None:
        if agent.context == "fork" and forks is None:
            raise ConfigError(
                f"sub-agent {agent.name!r} forks its parent's context, but this store "
                "cannot fork sessions; use context = 'fresh' or a store that forks",
                subagent=agent.name,
            )
        self.agent = agent
        self.child = child
        self.forks = forks
        self.parent: RunDriver | None = None

    @property
    def tool(self) -> Tool:
        description = self.agent.description or f"Delegate a task to the {self.agent.name} agent."
        spec = ToolSpec(
            name=self.agent.tool_name,
            description=description + " It works on its own and returns its final answer.",
            parameters=_PARAMETERS,
            effect=EffectClass.IDEMPOTENT,
        )
        return Tool(spec=spec, execute=self.execute, own_deadline=True)

    async def execute(self, invocation: ToolInvocation) -> ToolOutput:
        store = self.child.store
        session_id, run_id = child_ids(invocation.idempotency_key)
        parent_run = await store.get_run(invocation.run_id)
        try:
            child = await store.get_run(run_id)
        except RunNotFoundError:
            if self.agent.context == "fork":
                session_id = await self._fork(invocation)
            child = await self._start(invocation, parent_run, session_id, run_id)
        else:
            if child.status is RunStatus.RUNNING:  # its process died with the parent's
                await self.child.recover(run_id=run_id, force=True)
                child = await store.get_run(run_id)
        if child.status in (RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_RESOLUTION):
            why = f": {child.error.message}" if child.error is not None else ""
            raise SubAgentWaitingError(
                f"its {self.agent.name} agent's run {child.id} is "
                f"{child.status.value}{why}; the call goes on once that run ends",
                child_run_id=child.id,
            )
        self._charge(invocation.run_id, child)
        return await self._answer(child)

    async def _start(
        self, invocation: ToolInvocation, parent_run: Run, session_id: str, run_id: str
    ) -> Run:
        store = self.child.store
        try:
            await store.get_session(session_id)
        except SessionNotFoundError:
            parent = await store.get_session(invocation.session_id)
            await store.create_session(
                Session(
                    id=session_id,
                    created_at=self.child.clock.now(),
                    owner=parent.owner,
                    workspace=invocation.workspace,
                    title=f"{self.agent.name} for {invocation.call.id} of {parent_run.id}",
                )
            )
        task = invocation.call.arguments()["task"]
        link = ParentCall(
            session_id=invocation.session_id,
            run_id=parent_run.id,
            call_id=invocation.call.id,
            agent=self.agent.name,
        )
        result = await self.child.send(
            session_id, task, budget=self._budget(parent_run), run_id=run_id, parent=link
        )
        return result.run

    async def _fork(self, invocation: ToolInvocation) -> str:
        """A fork of the parent's session through its last complete point before the
        delegating call (the same branch again when the call is executed again)."""
        assert self.forks is not None
        stored = await self.child.store.read_messages(invocation.session_id)
        at = next(
            i
            for i, s in enumerate(stored)
            if isinstance(s.message, AssistantMessage)
            and any(c.id == invocation.call.id for c in s.message.tool_calls)
        )
        through = stored[at - 1].message.id
        made = await self.forks.fork_session(
            invocation.session_id, through, request_id=f"delegate-{invocation.idempotency_key}"
        )
        return made.branch.id

    def _budget(self, parent: Run) -> Budget:
        """The agent's share, capped by what the parent run has left."""
        used = parent.usage
        active = self.parent.active.get(parent.id) if self.parent is not None else None
        if active is not None:
            used = active.usage.freeze()
        limits = parent.budget
        budget = self.child.budget
        calls = _least(self.agent.max_model_calls, budget.max_model_calls)
        if limits.max_model_calls is not None:
            calls = _least(calls, max(limits.max_model_calls - used.model_calls, 1))
        tokens = _least(self.agent.max_total_tokens, budget.max_total_tokens)
        if limits.max_total_tokens is not None:
            tokens = _least(tokens, max(limits.max_total_tokens - used.total_tokens, 1))
        cost = budget.max_cost_usd
        if limits.max_cost_usd is not None:  # at the parent's prices, as its own calls
            caps = (active.caller if active and active.caller else self.parent_caller()).model
            spent = cost_usd(caps.capabilities, used.input_tokens, used.output_tokens) or 0.0
            left = max(limits.max_cost_usd - spent, 0.000001)
            cost = left if cost is None else min(cost, left)
        deadline = budget.deadline_seconds
        if parent.deadline_at is not None:
            left = max(parent.deadline_at - self.child.clock.now(), 0.001)
            deadline = left if deadline is None else min(deadline, left)
        return replace(
            budget,
            max_model_calls=calls,
            max_total_tokens=tokens,
            max_steps=_least(self.agent.max_steps, budget.max_steps),
            deadline_seconds=deadline,
            max_cost_usd=cost,
        )

    def parent_caller(self) -> ModelCaller:
        """The parent's model caller (the child's when the parent's is not known)."""
        return self.parent.caller if self.parent is not None else self.child.caller

    def _charge(self, parent_run_id: str, child: Run) -> None:
        """The child's model calls and tokens count against the parent run."""
        active = self.parent.active.get(parent_run_id) if self.parent is not None else None
        if active is None:
            return
        active.usage.model_calls += child.usage.model_calls
        active.usage.input_tokens += child.usage.input_tokens
        active.usage.output_tokens += child.usage.output_tokens

    async def _answer(self, child: Run) -> ToolOutput:
        if child.status is not RunStatus.COMPLETED:
            why = f": {child.error.message}" if child.error is not None else ""
            raise ToolError(
                f"the {self.agent.name} agent's run {child.id} ended {child.status.value}{why}"
            )
        stored = await self.child.store.read_messages(child.session_id)
        answers = [
            s.message
            for s in stored
            if isinstance(s.message, AssistantMessage) and s.message.run_id == child.id
        ]
        return ToolOutput(content=answers[-1].text if answers else "")


def _least(first: int | None, second: int | None) -> int | None:
    if first is None:
        return second
    return first if second is None else min(first, second)


async def sub_agent_sessions(store: SessionStore, session_id: str) -> list[str]:
    """The sessions of the session's sub-agent runs, and of theirs (one approvals inbox
    for a session and its children)."""
    children: dict[str, set[str]] = {}
    for run in await store.list_runs():
        if run.parent is not None:
            children.setdefault(run.parent.session_id, set()).add(run.session_id)
    out: list[str] = []
    todo = [session_id]
    while todo:
        for child in sorted(children.get(todo.pop(), ())):
            if child not in out and child != session_id:
                out.append(child)
                todo.append(child)
    return out


async def parent_calls(store: SessionStore, approvals: Sequence[Approval]) -> dict[str, ParentCall]:
    """The parent call of each approval's run that is a sub-agent's, by run id."""
    out: dict[str, ParentCall] = {}
    for run_id in {a.run_id for a in approvals}:
        try:
            run = await store.get_run(run_id)
        except RunNotFoundError:  # a request whose run is gone names no parent
            continue
        if run.parent is not None:
            out[run_id] = run.parent
    return out


async def sub_agent_children(store: SessionStore, session_id: str) -> list[Run]:
    """The child runs started by the session's own delegate calls, in call order.

    Reads only the session's runs and their execution records: a child's ids derive from
    its call's idempotency key (:func:`child_ids`), so no scan of other sessions is needed.
    A derived run counts only if it names that very call as its parent (a tool that merely
    happens to be called ``delegate_…`` starts no child)."""
    out: list[Run] = []
    for run in reversed(await store.list_runs(session_id=session_id)):
        for record in await store.get_executions(run.id):
            if not record.tool_name.startswith("delegate_"):
                continue
            try:
                child = await store.get_run(child_ids(record.idempotency_key)[1])
            except RunNotFoundError:  # the call has not started its child (yet)
                continue
            parent = child.parent
            if parent is not None and (parent.session_id, parent.run_id, parent.call_id) == (
                session_id,
                run.id,
                record.call_id,
            ):
                out.append(child)
    return out
