"""The order of governance for one validated call (docs/design.md#governance):

deterministic policy → the Reviewer role where the policy asks for it → a person's
approval, bound to the exact call, where required.

``deny`` from the policy is final (no approval can override it). For a call that needs a
person, the approval store is read *before* the reviewer is asked again, so a run resumed
after approval neither re-reviews nor asks twice. Authority comes only from the approval
store; nothing in the history is read as a grant (the history is shown to the reviewer,
tool output quoted as data, but the reviewer can only narrow what the policy allows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from typing import Literal

from plait.application.governance.facts import WorkspaceProbe, call_facts
from plait.application.governance.reviewer import Ask, Reviewer, ReviewSink
from plait.application.ports import ApprovalStore, Clock, IdGenerator
from plait.domain.errors import ApprovalRefusedError
from plait.domain.governance import (
    Approval,
    ApprovalStatus,
    ApprovalUse,
    Decider,
    Decision,
    Verdict,
)
from plait.domain.messages import Message, ToolCall, Usage
from plait.domain.policy import Action, CallFacts, Policy, PolicyVerdict
from plait.domain.record import record
from plait.domain.tools import EffectClass, ToolSpec

__all__ = ["GateOutcome", "Governor"]

Outcome = Literal["allow", "deny", "wait"]


@record(kw_only=True)
class GateOutcome:
    """What to do with a call: run it, deny it (``decision.reason`` goes to the model) or
    wait for the person named by ``approval``. ``trail`` is every decision taken on the
    way, in order (policy, reviewer, user)."""

    outcome: Outcome
    decision: Decision
    trail: tuple[Decision, ...]
    approval: Approval | None = None
    reviewer_calls: int = 0
    reviewer_usage: Usage = field(default_factory=Usage)

    def describe(self) -> str:
        """One line per decision: ``policy:rules.no-deploy deny: deploy is frozen``."""
        return "; ".join(f"{d.label()} {d.verdict.value}: {d.reason}" for d in self.trail)


def _policy_decision(policy_verdict: PolicyVerdict, at: float) -> Decision:
    verdict = {Action.ALLOW: Verdict.ALLOW, Action.DENY: Verdict.DENY}.get(
        policy_verdict.action, Verdict.ASK_USER
    )
    reason = (
        policy_verdict.reason
        if policy_verdict.action is not Action.REVIEW
        else f"needs review: {policy_verdict.reason}"
    )
    return Decision(
        verdict=verdict, reason=reason, by=Decider.POLICY, by_name=policy_verdict.rule, at=at
    )


class Governor:
    """Decides one call at a time. Stateless between calls except the reviewer's budget
    share per run (kept in memory: a restarted process starts a fresh share)."""

    def __init__(
        self,
        *,
        policy: Policy,
        approvals: ApprovalStore,
        clock: Clock,
        ids: IdGenerator,
        reviewer: Reviewer | None = None,
        probe: WorkspaceProbe | None = None,
    ) -> None:
        self.policy = policy
        self.approvals = approvals
        self.clock = clock
        self.ids = ids
        self.reviewer = reviewer
        self.probe = probe
        self._review_calls: dict[str, int] = {}

    def facts(
        self, call: ToolCall, effect: EffectClass, workspace: str | None, calls_so_far: int = 0
    ) -> CallFacts:
        return call_facts(
            self.policy,
            call,
            read_only=effect is EffectClass.READ_ONLY,
            workspace=workspace,
            calls_so_far=calls_so_far,
            probe=self.probe,
        )

    async def check(
        self,
        *,
        session_id: str,
        run_id: str,
        workspace: str | None,
        call: ToolCall,
        spec: ToolSpec | None,
        effect: EffectClass,
        history: Sequence[Message],
        calls_so_far: int = 0,
        model_calls_left: int | None = None,
        ask: Ask | None = None,
        lease_token: int | None = None,
        report: ReviewSink | None = None,
    ) -> GateOutcome:
        """Decide one call. ``ask`` reaches the reviewer's model through the run (else
        the reviewer's own client is used); ``model_calls_left`` is what remains of the
        run's model-call budget; ``lease_token`` fences the approval request it may write;
        ``report`` is told about the reviewer's work (the run's events)."""
        now = self.clock.now()
        facts = self.facts(call, effect, workspace, calls_so_far)
        pv = self.policy.evaluate(facts)
        policy = _policy_decision(pv, now)
        if pv.action in (Action.ALLOW, Action.DENY):
            return GateOutcome(
                outcome="allow" if pv.action is Action.ALLOW else "deny",
                decision=policy,
                trail=(policy,),
            )
        use = self._use(session_id, call, facts, workspace, now)
        person = await self._person(run_id, use)
        if person is not None:
            return GateOutcome(
                outcome=person[0], decision=person[1], trail=(policy, person[1]), approval=person[2]
            )
        trail: list[Decision] = [policy]
        why = policy.reason
        review = _Review(policy, 0, Usage())
        if pv.action is Action.REVIEW:
            review = await self._review(
                run_id, call, spec, history, why, model_calls_left, ask, report
            )
            trail.append(review.decision)
            if review.decision.verdict is not Verdict.ASK_USER:
                return GateOutcome(
                    outcome="allow" if review.decision.verdict is Verdict.ALLOW else "deny",
                    decision=review.decision,
                    trail=tuple(trail),
                    reviewer_calls=review.model_calls,
                    reviewer_usage=review.usage,
                )
            why = f"the reviewer asks a person: {review.decision.reason}"
        return GateOutcome(
            outcome="wait",
            decision=trail[-1],
            trail=tuple(trail),
            approval=await self._request(run_id, use, why, lease_token),
            reviewer_calls=review.model_calls,
            reviewer_usage=review.usage,
        )

    def _use(
        self, session_id: str, call: ToolCall, facts: CallFacts, workspace: str | None, now: float
    ) -> ApprovalUse:
        """The call as an approval must match it: its arguments, the paths it touches and
        (where a probe can tell) the state of those paths now."""
        scope = tuple(sorted({*facts.paths, *(facts.command.writes if facts.command else ())}))
        state = (
            self.probe.state(workspace, scope)
            if self.probe is not None and workspace is not None and scope
            else None
        )
        return ApprovalUse(
            session_id=session_id,
            call_id=call.id,
            tool_name=call.name,
            args_digest=call.argument_digest(),
            scope=scope,
            workspace_state=state,
            now=now,
        )

    async def _request(
        self, run_id: str, use: ApprovalUse, reason: str, lease_token: int | None
    ) -> Approval:
        """Ask a person about the call (the pending request stored for it, if any), fenced
        by the run's lease token (a process that lost the run writes no request)."""
        return await self.approvals.request_approval(
            Approval(
                id=self.ids.new("apr"),
                session_id=use.session_id,
                run_id=run_id,
                call_id=use.call_id,
                tool_name=use.tool_name,
                args_digest=use.args_digest,
                scope=use.scope,
                workspace_state=use.workspace_state,
                requested_at=use.now,
                reason=reason,
            ),
            lease_token=lease_token,
        )

    async def _person(
        self, run_id: str, use: ApprovalUse
    ) -> tuple[Outcome, Decision, Approval] | None:
        """A person's standing decision about this very call, if there is one."""
        mine = [
            a
            for a in await self.approvals.list_approvals(session_id=use.session_id, run_id=run_id)
            if a.call_id == use.call_id
        ]
        if not mine:
            return None
        latest = mine[0]
        at = latest.decided_at
        if latest.status is ApprovalStatus.PENDING:
            waiting = Decision(
                verdict=Verdict.ASK_USER, reason=latest.reason, by=Decider.POLICY, at=use.now
            )
            return "wait", waiting, latest
        grantor = latest.grantor or ""
        if latest.status is ApprovalStatus.DENIED:
            reason = latest.denial_reason or "no reason given"  # the decider names the person
            return "deny", _user(Verdict.DENY, reason, grantor, at), latest
        try:
            used = await self.approvals.consume_approval(latest.id, use)
        except ApprovalRefusedError:
            return None  # expired, or the call or workspace changed: decide afresh
        reason = f"approved by {grantor} (approval {used.id})"
        return "allow", _user(Verdict.ALLOW, reason, grantor, at), used

    async def _review(
        self,
        run_id: str,
        call: ToolCall,
        spec: ToolSpec | None,
        history: Sequence[Message],
        why: str,
        model_calls_left: int | None,
        ask: Ask | None,
        report: ReviewSink | None = None,
    ) -> _Review:
        if self.reviewer is None:
            decision = Decision(
                verdict=Verdict.ASK_USER,
                reason="the policy asks for review but no reviewer model is configured",
                by=Decider.REVIEWER,
                at=self.clock.now(),
            )
            return _Review(decision, 0, Usage())
        used = self._review_calls.get(run_id, 0)
        share = max(self.reviewer.config.max_model_calls - used, 0)
        left = share if model_calls_left is None else min(share, max(model_calls_left, 0))
        out = await self.reviewer.review(
            call, spec, history, why=why, calls_left=left, ask=ask, run_id=run_id, report=report
        )
        self._review_calls[run_id] = used + out.model_calls
        reviewed = out.decision
        decision = Decision(
            verdict=reviewed.verdict,
            reason=reviewed.reason,
            by=reviewed.by,
            by_name=reviewed.by_name,
            at=self.clock.now(),
        )
        return _Review(decision, out.model_calls, out.usage)


@record
class _Review:
    decision: Decision
    model_calls: int
    usage: Usage


def _user(verdict: Verdict, reason: str, grantor: str, at: float | None) -> Decision:
    return Decision(verdict=verdict, reason=reason, by=Decider.USER, by_name=grantor, at=at)
