"""What a run needs of its models, checked once when it starts (article §六): a missing
capability or a setting a model cannot honour is a ConfigError naming the model, the role,
what is missing and the fix — before anything is written or any model is called, never
dropped silently mid-run.

What each role needs:

- assistant: ``tool_calls`` when the agent offers tools;
- reviewer (only when the policy can send a call to review): ``structured_output`` (its
  answer is a decision object), and ``[reviewer] max_output_tokens`` within the model's
  ``max_output_tokens``;
- summarizer (only when automatic compaction can run: on, and the assistant's context
  window known): ``structured_output`` (its answer is a summary object);
- with a cost ceiling: prices for every model the run may call.

Parallel tool calls are never required: the loop runs a response's calls one by one, so
a model without them (``parallel_tool_calls = false``) simply makes one call per step.
"""

from __future__ import annotations

from plait.application.model_caller import check_cost_ceiling
from plait.application.ports import ModelClient
from plait.domain.errors import ConfigError
from plait.domain.record import record

__all__ = ["RunModelsNeeded", "check_run_capabilities"]


@record(kw_only=True)
class RunModelsNeeded:
    """The models one run may call, by role, and what it asks of them."""

    assistant: ModelClient
    tools: int = 0
    """How many tools the agent offers the assistant."""
    reviewer: ModelClient | None = None
    """``None``: the policy never asks the Reviewer."""
    reviewer_max_output_tokens: int | None = None
    summarizer: ModelClient | None = None
    """``None``: no automatic compaction in this run."""
    max_cost_usd: float | None = None
    spec: str | None = None
    """The assistant's spec, for messages."""


def _missing(model: ModelClient, role: str, capability: str, why: str, fix: str) -> ConfigError:
    return ConfigError(
        f"model {model.name!r} ({role}) lacks {capability}, which this run needs: {why}; {fix}",
        model=model.name,
        role=role,
        capability=capability,
    )


def check_run_capabilities(needed: RunModelsNeeded) -> None:
    """Raise the first :class:`ConfigError` for a capability or setting the run's models
    cannot honour (see the module docstring); return when every role is served."""
    assistant = needed.assistant
    if needed.tools and not assistant.capabilities.tool_calls:
        raise ConfigError(
            f"model {assistant.name!r} cannot call tools, but this agent has "
            f"{needed.tools} tools; choose a model with tool calling",
            model=assistant.name,
            role="assistant",
            capability="tool_calls",
        )
    reviewer = needed.reviewer
    if reviewer is not None:
        if not reviewer.capabilities.structured_output:
            raise _missing(
                reviewer,
                "reviewer",
                "structured output",
                "the policy sends calls to review and the reviewer must answer a decision object",
                "set [reviewer] model in the policy file to a model with structured output, "
                "or declare structured_output = true for this model in plait.toml",
            )
        cap = reviewer.capabilities.max_output_tokens
        asked = needed.reviewer_max_output_tokens
        if cap is not None and asked is not None and asked > cap:
            raise ConfigError(
                f"setting [reviewer] max_output_tokens = {asked}: the reviewer model "
                f"{reviewer.name!r} produces at most {cap} tokens; lower it or choose "
                "another reviewer model",
                model=reviewer.name,
                role="reviewer",
                setting="max_output_tokens",
            )
    summarizer = needed.summarizer
    if summarizer is not None and not summarizer.capabilities.structured_output:
        raise _missing(
            summarizer,
            "summarizer",
            "structured output",
            "automatic compaction asks the summarizer for a structured summary",
            "set [compaction] summarizer_model to a model with structured output, declare "
            "structured_output = true for this model in plait.toml, or set [compaction] "
            "auto = false",
        )
    seen: set[str] = set()
    for model in (assistant, reviewer, summarizer):
        if model is None or model.name in seen:
            continue
        seen.add(model.name)
        check_cost_ceiling(model, needed.max_cost_usd, needed.spec if model is assistant else None)
