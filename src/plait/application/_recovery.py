"""Recovery of one run whose lease expired (docs/design.md#recovery-without-repeating-side-effects):
which model it continues with, who wins the lease, the dead process's leftovers, and what the
operator is told."""

from __future__ import annotations

from plait.application._models import RunModels
from plait.application._run_state import RunResult
from plait.application._waiting import sweep_leftovers
from plait.application.driver import RunDriver
from plait.application.events import RunObserver
from plait.application.ports import Clock, LeftoverSweeper, SessionStore, TextSink
from plait.domain.errors import ConfigError, LeaseLostError
from plait.domain.record import record
from plait.domain.runs import Run, RunStatus

__all__ = ["Recoverer", "RecoveryReport"]


@record
class RecoveryReport:
    run_id: str
    outcome: str
    """``resumed`` (this process took the run over and drove it on), or ``skipped``."""
    detail: str
    result: RunResult | None = None


@record(kw_only=True)
class Recoverer:
    """What recovering a run needs from the service (its collaborators, not the service)."""

    store: SessionStore
    driver: RunDriver
    models: RunModels
    clock: Clock
    sweeper: LeftoverSweeper | None

    async def recover(
        self,
        run: Run,
        *,
        observer: RunObserver | None,
        on_text: TextSink | None,
        force: bool,
    ) -> RecoveryReport:
        """Take ``run`` over and drive it on, or say why it was skipped."""
        queued = force and run.status is RunStatus.QUEUED  # named: no worker may ever come
        if run.status is not RunStatus.RUNNING and not queued:
            hint = "; start it with `plait runs resume`" if run.status is RunStatus.QUEUED else ""
            return RecoveryReport(
                run.id, "skipped", f"run is {run.status.value}, not running{hint}"
            )
        try:
            caller = self.models.caller_for(run)
        except ConfigError as exc:
            return RecoveryReport(run.id, "skipped", exc.message)
        try:
            active = await self.driver.take_over(
                run,
                observer=observer,
                on_text=on_text,
                caller=caller,
                force=force,
                status=RunStatus.RUNNING if queued else None,
            )
        except LeaseLostError as exc:
            now_run = await self.store.get_run(run.id)
            detail = (
                exc.message
                if now_run.status is RunStatus.RUNNING
                else f"run is {now_run.status.value}, not running"
            )
            return RecoveryReport(run.id, "skipped", detail)
        await sweep_leftovers(self.sweeper, active.session.workspace, run, self.clock.now())
        result = await self.driver.drive(active, pending=True)
        return RecoveryReport(run.id, "resumed", f"run is {result.run.status.value}", result)
