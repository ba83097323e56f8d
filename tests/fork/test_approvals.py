"""An approval granted in the source authorizes nothing in a branch (DESIGN §5, §7)."""

from __future__ import annotations

from typing import Any

import pytest

from plait.domain.errors import ApprovalRefusedError
from plait.domain.governance import Approval, ApprovalUse
from plait.domain.messages import argument_digest
from tests.fork.conftest import forks_over, run, seed


def test_approvals_are_not_inherited(store: Any) -> None:
    async def go() -> None:
        await seed(store)
        digest = argument_digest('{"path": "package.json"}')
        pending = Approval(
            id="apr_1",
            session_id="S",
            run_id="r0",
            call_id="c9",
            tool_name="write_file",
            args_digest=digest,
            scope=("package.json",),
            workspace_state=None,
            requested_at=1.0,
            reason="writes a file",
        )
        await store.request_approval(pending)
        await store.decide_approval("apr_1", approve=True, grantor="alice", at=2.0, ttl_seconds=1e9)
        branch = (await forks_over(store).fork_session("S", "m6", "req-1")).branch
        assert await store.list_approvals(session_id=branch.id) == []
        use = ApprovalUse(
            session_id=branch.id,
            call_id="c9",
            tool_name="write_file",
            args_digest=digest,
            scope=("package.json",),
            workspace_state=None,
            now=3.0,
        )
        with pytest.raises(ApprovalRefusedError):
            await store.consume_approval("apr_1", use)
        assert [a.id for a in await store.list_approvals(session_id="S")] == ["apr_1"]

    run(go())
