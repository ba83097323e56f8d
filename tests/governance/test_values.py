"""Decision and Approval invariants."""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from plait.domain.errors import ApprovalRefusedError, ValidationError
from plait.domain.governance import ApprovalStatus, Decider, Decision, Verdict
from tests.contract.approval_contract import pending, use


def test_a_denial_always_carries_a_reason() -> None:
    with pytest.raises(ValidationError):
        Decision(verdict=Verdict.DENY, reason=" ", by=Decider.POLICY)
    with pytest.raises(ValidationError):
        Decision(verdict=Verdict.ASK_USER, reason="", by=Decider.REVIEWER)
    d = Decision(verdict="allow", reason="", by="reviewer", by_name="m")  # type: ignore[arg-type]
    assert d.verdict is Verdict.ALLOW and d.label() == "reviewer:m"
    with pytest.raises(ValueError, match="maybe"):
        Decision(verdict="maybe", reason="x", by=Decider.USER)  # type: ignore[arg-type]


def test_approval_states() -> None:
    a = pending()
    assert a.state(0) == "pending"
    with pytest.raises(ValidationError):
        replace(a, status=ApprovalStatus.APPROVED)
    with pytest.raises(ValidationError):
        a.approved(grantor="ana", at=1.0, ttl_seconds=0)
    ok = a.approved(grantor="ana", at=1_000.0, ttl_seconds=10)
    assert ok.state(1_005.0) == "approved" and ok.state(1_010.0) == "expired"
    assert ok.refusal(use(now=1_005.0)) is None
    assert ok.refusal(use(now=1_010.0)) == "approval apr1 expired"
    used = ok.consumed(call_id="c1", at=1_005.0)
    assert used.state(1_005.0) == "consumed"
    # consumed in time by this call: still this call's, even after the expiry
    assert used.refusal(use(now=2_000.0)) is None
    assert used.refusal(use(call_id="c2")) == "approval apr1 was granted for a different call"


def test_approval_refused_error_pickles() -> None:
    e = ApprovalRefusedError("approval apr1 expired", approval_id="apr1")
    back = pickle.loads(pickle.dumps(e))
    assert back.code == "approval_refused" and back.details == {"approval_id": "apr1"}
