"""Which meter and window measure a model: never a guessed window."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from plait.application.compaction._calibration import Calibration
from plait.application.ports import ModelClient, TokenMeter
from plait.domain.errors import TokenMeterModelUnconfiguredError

__all__ = ["ModelProfile", "ModelProfiles"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelProfile:
    model: str
    meter: TokenMeter
    context_window: int
    max_output_tokens: int | None = None
    calibration: Calibration = field(default_factory=Calibration, compare=False)
    """The meter's correction by reported usage (shared by every context of the model)."""


class ModelProfiles:
    """Model name -> (meter, window). Built in the composition root from the configured
    models; asking for any other model raises
    :class:`~plait.domain.errors.TokenMeterModelUnconfiguredError`."""

    def __init__(
        self, profiles: Iterable[ModelProfile] = (), *, without_window: Iterable[str] = ()
    ) -> None:
        self._profiles = {p.model: p for p in profiles}
        self._without_window = set(without_window) - set(self._profiles)

    @classmethod
    def of_clients(
        cls, clients: Iterable[ModelClient], meter_for: Callable[[ModelClient], TokenMeter]
    ) -> ModelProfiles:
        """Profiles of clients whose capabilities declare a context window. A client
        without one is known but cannot be measured: automatic compaction leaves it alone
        (:meth:`measurable` is False) and asking for its profile raises."""
        profiles = []
        unknown_window = []
        for c in clients:
            window = c.capabilities.context_window
            if window is None:
                unknown_window.append(c.name)
            else:
                profiles.append(
                    ModelProfile(
                        model=c.name,
                        meter=meter_for(c),
                        context_window=window,
                        max_output_tokens=c.capabilities.max_output_tokens,
                    )
                )
        return cls(profiles, without_window=unknown_window)

    def declared_without_window(self, model: str) -> bool:
        """A configured model whose context window nobody declared (not an unknown one)."""
        return model in self._without_window

    def add(self, profile: ModelProfile) -> None:
        self._profiles[profile.model] = profile

    def get(self, model: str) -> ModelProfile:
        profile = self._profiles.get(model)
        if profile is None and model in self._without_window:
            raise TokenMeterModelUnconfiguredError(
                f"TOKEN_METER_MODEL_UNCONFIGURED: model {model!r} declares no context window, "
                "so its context cannot be budgeted; declare context_window in its "
                "capabilities or configuration",
                model=model,
            )
        if profile is None:
            known = ", ".join(sorted(self._profiles)) or "none"
            raise TokenMeterModelUnconfiguredError(
                f"TOKEN_METER_MODEL_UNCONFIGURED: no token meter and context window are "
                f"configured for model {model!r} (configured: {known}); declare the model's "
                "context_window in its capabilities or configuration",
                model=model,
            )
        return profile
