"""Which model a run continues with when this process takes it over (issue 6): the run
records its model's name and spec; recovery and resume reopen that model through a model
factory (``plait.runtime.open_model``) when it is not this service's own."""

from __future__ import annotations

from collections.abc import Callable

from plait.application.model_caller import ModelCaller
from plait.application.ports import ModelClient
from plait.domain.errors import ConfigError
from plait.domain.runs import Run

__all__ = ["ModelFactory", "RunModels"]

ModelFactory = Callable[[str], ModelClient]
"""Opens a model from its spec; raises ConfigError when it cannot."""


class RunModels:
    def __init__(self, caller: ModelCaller, spec: str | None, factory: ModelFactory | None) -> None:
        self.caller = caller
        self.spec = spec
        """The spec of this service's own model, recorded on the runs it starts."""
        self.factory = factory

    def check_can_run(self) -> None:
        """Fail (ConfigError naming the fix) before anything is claimed or written when
        this service can open no model at all."""
        if self.factory is None:
            self.caller.model  # noqa: B018

    def caller_for(self, run: Run) -> ModelCaller | None:
        """The caller for a run taken over: None for this service's own model, else one
        over the model the run was started with (its recorded spec), opened through
        ``model_factory``. Raises ConfigError when that model cannot be opened."""
        mine = self.caller.model.name if self.caller.has_model else None
        if not run.model or run.model == mine:
            return None
        if run.model_spec is None or self.factory is None:
            has = "no model chosen" if mine is None else f"this process has {mine!r}"
            raise ConfigError(
                f"run was started with model {run.model!r}; {has} and the run's model "
                "cannot be reopened (its spec was not recorded): pass --model",
                run_id=run.id,
                model=run.model,
            )
        try:
            model = self.factory(run.model_spec)
        except ConfigError as exc:
            raise ConfigError(
                f"run was started with model {run.model!r} ({run.model_spec}), which "
                f"cannot be opened here: {exc.message}",
                run_id=run.id,
                model=run.model,
            ) from exc
        return self.caller.with_model(model)
