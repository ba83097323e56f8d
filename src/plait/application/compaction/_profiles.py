"""Which meter and window measure a model: never a guessed window."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field

from plait.application.compaction._calibration import Calibration
from plait.application.ports import ModelClient, TokenMeter
from plait.domain.errors import TokenMeterModelUnconfiguredError
from plait.domain.record import record

__all__ = ["ModelProfile", "ModelProfiles"]


@record(kw_only=True)
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
        self,
        profiles: Iterable[ModelProfile] = (),
        *,
        without_window: Iterable[str] = (),
        meter_for: Callable[[ModelClient], TokenMeter] | None = None,
    ) -> None:
        self._profiles = {p.model: p for p in profiles}
        self._without_window = set(without_window) - set(self._profiles)
        self._meter_for = meter_for

    @classmethod
    def of_clients(
        cls, clients: Iterable[ModelClient], meter_for: Callable[[ModelClient], TokenMeter]
    ) -> ModelProfiles:
        """Profiles of clients whose capabilities declare a context window. A client
        without one is known but cannot be measured: automatic compaction leaves it alone
        (:meth:`measurable` is False) and asking for its profile raises."""
        profiles = cls(meter_for=meter_for)
        for client in clients:
            profiles.learn(client)
        return profiles

    def learn(self, client: ModelClient) -> None:
        """Know ``client`` too (a run that continues with another model than the
        service's), by its declared window and the meter the profiles were built with."""
        if self._meter_for is None or client.name in self._profiles:
            return
        window = client.capabilities.context_window
        if window is None:
            self._without_window.add(client.name)
            return
        self._without_window.discard(client.name)
        self._profiles[client.name] = ModelProfile(
            model=client.name,
            meter=self._meter_for(client),
            context_window=window,
            max_output_tokens=client.capabilities.max_output_tokens,
        )

    def add(self, profile: ModelProfile) -> None:
        self._profiles[profile.model] = profile

    def get(self, model: str) -> ModelProfile:
        profile = self._profiles.get(model)
        if profile is None and model in self._without_window:
            raise TokenMeterModelUnconfiguredError(
                f"TOKEN_METER_MODEL_UNCONFIGURED: model {model!r} declares no context window, "
                "so its context cannot be budgeted; declare context_window in its "
                "capabilities or configuration ([models.NAME] in plait.toml), or turn automatic "
                "compaction off ([compaction] auto = false)",
                model=model,
            )
        if profile is None:
            known = ", ".join(sorted(self._profiles)) or "none"
            raise TokenMeterModelUnconfiguredError(
                f"TOKEN_METER_MODEL_UNCONFIGURED: no token meter and context window are "
                f"configured for model {model!r} (configured: {known}); declare the model's "
                "context_window in its capabilities or configuration ([models.NAME] in "
                "plait.toml), or turn automatic compaction off ([compaction] auto = false)",
                model=model,
            )
        return profile
