"""OpenTelemetry traces and metrics of runs, from the run events.

Semantic conventions: OpenTelemetry semconv 1.37 GenAI attributes (status "development"),
as shipped in ``opentelemetry-semantic-conventions`` 0.66b2 (schema 1.44): spans
``invoke_agent {agent}`` (one per *segment*: each stretch of a run one process drives),
``chat {model}`` (one per model call attempt) and ``execute_tool {tool}``; plait's own
``compaction``, ``recover_run`` (a run taken over: the open calls of its last persisted
point settled, linked to the stretch it continues), ``review {tool}`` (the Reviewer role's
decision about a call, with the conventions' ``gen_ai.evaluation.*`` attributes: they
define no span for an evaluation), ``await_approval {tool}`` and ``fork_session``. Names
are literals here: the conventions' incubating module is not imported at run time.

Continuity: a run's trace begins with its root span ``plait.run``, ended (so exported) as
soon as the run begins: a process killed mid-run cannot leave the trace without its root.
Its W3C ``traceparent`` is stored with the run (``Run.trace_context``). Every segment is a
child of it; a later one (recovery, a worker's claim, a resume after a person's answer),
in whatever process, is in the same trace with a link to it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from plait.adapters.telemetry._settings import TelemetrySettings
from plait.application.events import (
    CompactionEvent,
    MessageSaved,
    ModelCallEnded,
    ModelCallStarted,
    RecoveryEvent,
    ReviewEvent,
    RunEnded,
    RunEvent,
    ToolDecided,
    ToolStarted,
)
from plait.domain.errors import PlaitError
from plait.domain.messages import AssistantMessage, ToolResultMessage, ToolStatus, UserMessage
from plait.domain.runs import Run, RunStatus
from plait.domain.session import Session

__all__ = ["AGENT_NAME", "OtelTelemetry"]

AGENT_NAME = "plait"
log = logging.getLogger("plait.telemetry")
_SCOPE = "plait"
_PROPAGATOR = TraceContextTextMapPropagator()
_FAILED = frozenset({RunStatus.FAILED, RunStatus.BUDGET_EXHAUSTED})
"""Run statuses whose segment span is an error (waiting and cancelled runs are not)."""
_TOOL_ERRORS = frozenset({ToolStatus.FAILED, ToolStatus.UNKNOWN, ToolStatus.CANCELLED})
_ROOT = "plait.run"
"""The run's root span: ended as the run begins, the parent of every segment."""
_EVALUATION = "plait.tool_call_review"
"""``gen_ai.evaluation.name`` of a review: the Reviewer role's judgement of one call."""
_PROVIDERS = {"gemini": "gcp.gemini", "google": "gcp.gemini", "deepseek": "deepseek"}


def _provider(run: Run) -> str:
    """``gen_ai.provider.name`` from the run's model spec (``openai:gpt-4o`` → openai)."""
    spec = run.model_spec or ""
    prefix = spec.split(":", 1)[0] if ":" in spec else ""
    return _PROVIDERS.get(prefix, prefix or "plait")


def traceparent(span: Span) -> str:
    sc = span.get_span_context()
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def _parent(context: str) -> Any:
    """The OTel context of a stored traceparent (an empty context if it is malformed)."""
    return _PROPAGATOR.extract({"traceparent": context})


@dataclass(slots=True)
class _Timed:
    span: Span
    started: float = field(default_factory=time.perf_counter)


@dataclass(slots=True)
class _Segment:
    run: Run
    span: Span
    provider: str
    chat: _Timed | None = None
    tools: dict[str, _Timed] = field(default_factory=dict)
    waits: dict[str, Span] = field(default_factory=dict)
    compaction: Span | None = None
    review: Span | None = None
    recovery: Span | None = None
    previous: Any = None
    """The span context of the stretch this segment continues (its stored trace)."""
    step: tuple[int, float] | None = None


class OtelTelemetry:
    """The :class:`~plait.application.ports.RunTelemetry` port over OpenTelemetry
    providers (tests pass in-memory ones; :meth:`from_settings` builds exporting ones)."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        capture_content: bool = False,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.tracer = tracer_provider.get_tracer(_SCOPE)
        self.capture_content = capture_content
        self._segments: dict[str, _Segment] = {}
        meter = meter_provider.get_meter(_SCOPE)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens used per model call"
        )
        self.operation_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Model call duration"
        )
        self.step_duration = meter.create_histogram(
            "plait.step.duration", unit="s", description="One step: model call and its tools"
        )
        self.tool_duration = meter.create_histogram(
            "plait.tool.duration", unit="s", description="Tool call, by tool and status"
        )
        self.runs = meter.create_counter(
            "plait.runs", unit="{run}", description="Run segments ended, by run status"
        )
        self.compactions = meter.create_counter(
            "plait.compactions", unit="{compaction}", description="Compactions, by outcome"
        )
        self.tokens_saved = meter.create_counter(
            "plait.compaction.tokens_saved", unit="{token}", description="Context tokens saved"
        )
        self.queue_depth_gauge = meter.create_gauge(
            "plait.queue.depth", unit="{run}", description="Queued runs seen by a worker's poll"
        )
        self.claim_latency = meter.create_histogram(
            "plait.queue.claim_latency", unit="s", description="Queued run: submitted to claimed"
        )

    @classmethod
    def from_settings(
        cls, settings: TelemetrySettings, env: Mapping[str, str] | None = None
    ) -> OtelTelemetry:
        """Exporting providers: the resource from ``OTEL_SERVICE_NAME`` /
        ``OTEL_RESOURCE_ATTRIBUTES`` (``service_name`` over them), the sampler from
        ``OTEL_TRACES_SAMPLER``, the OTLP endpoint and headers from
        ``OTEL_EXPORTER_OTLP_*`` (all read by the SDK)."""
        attributes = {} if settings.service_name is None else {SERVICE_NAME: settings.service_name}
        resource = Resource.create(attributes)
        named = str(resource.attributes.get(SERVICE_NAME, ""))
        if SERVICE_NAME not in attributes and named.startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: "plait"}))
        tracer_provider = SdkTracerProvider(resource=resource)
        readers: list[MetricReader] = []
        exporter = _span_exporter(settings.exporter)
        if exporter is not None:
            processor = (
                SimpleSpanProcessor(exporter)
                if settings.span_processor == "simple"
                else BatchSpanProcessor(exporter)
            )
            tracer_provider.add_span_processor(processor)
            readers.append(PeriodicExportingMetricReader(_metric_exporter(settings.exporter)))
        meter_provider = SdkMeterProvider(resource=resource, metric_readers=readers)
        return cls(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            capture_content=settings.capture_content,
        )

    def shutdown(self) -> None:
        """Flush and stop the providers this adapter built (at the process's end)."""
        for provider in (self._tracer_provider, self._meter_provider):
            stop = getattr(provider, "shutdown", None)
            if stop is not None:
                stop()

    # --- the port -----------------------------------------------------------------------

    def begin(self, run: Run, how: str) -> str | None:
        try:
            return self._begin(run, how)
        except Exception:  # telemetry never stops a run
            log.exception("telemetry: the run's span could not be started")
            return None

    def _begin(self, run: Run, how: str) -> str | None:
        self._close(run.id, None, "superseded")  # a segment this process left open
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.provider.name": _provider(run),
            "gen_ai.conversation.id": run.session_id,
            "plait.run.id": run.id,
            "plait.run.segment": how,
        }
        if run.model:
            attributes["gen_ai.request.model"] = run.model
        name = f"invoke_agent {AGENT_NAME}"
        stored = run.trace_context
        parent = _parent(stored) if stored else None
        linked = trace.get_current_span(parent).get_span_context() if parent else None
        previous = linked if linked is not None and linked.is_valid else None
        if previous is not None:
            span = self.tracer.start_span(
                name,
                context=parent,
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                links=[Link(previous, {"plait.link": "previous_segment"})],
            )
            context = None
        else:  # the run's root: a marker ended (so exported) at once, which a killed
            # process cannot take with it; every segment is its child
            root: dict[str, Any] = {
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.conversation.id": run.session_id,
                "plait.run.id": run.id,
            }
            if run.parent is not None:  # a sub-agent's run: in the trace of its parent call
                root["plait.parent.session_id"] = run.parent.session_id
                root["plait.parent.run_id"] = run.parent.run_id
                root["plait.parent.call_id"] = run.parent.call_id
                root["plait.subagent"] = run.parent.agent
            anchor = self.tracer.start_span(
                _ROOT,
                context=self._delegating(run),
                kind=SpanKind.INTERNAL,
                attributes=root,
            )
            anchor.end()
            span = self.tracer.start_span(
                name,
                context=trace.set_span_in_context(anchor),
                kind=SpanKind.INTERNAL,
                attributes=attributes,
            )
            context = traceparent(anchor) if anchor.get_span_context().is_valid else None
        self._segments[run.id] = _Segment(
            run=run, span=span, provider=_provider(run), previous=previous
        )
        if how == "claimed":  # run times are epoch seconds (the system clock's)
            self.claim_latency.record(max(time.time() - run.started_at, 0.0))
        return context

    def _delegating(self, run: Run) -> Any:
        """The context a sub-agent's run is traced in: its parent's ``execute_tool`` span
        for the delegating call (else the parent's segment) when this process drives the
        parent; ``None`` (a trace of its own, its root naming the parent) otherwise."""
        if run.parent is None:
            return None
        parent = self._segments.get(run.parent.run_id)
        if parent is None:
            return None
        timed = parent.tools.get(run.parent.call_id)
        return trace.set_span_in_context(timed.span if timed is not None else parent.span)

    def observe(self, event: RunEvent) -> None:
        try:
            self._observe(event)
        except Exception:  # telemetry never stops a run
            log.exception("telemetry: event dropped")

    def end(self, run: Run, error: BaseException | None = None) -> None:
        segment = self._segments.get(run.id)
        if segment is None:
            return
        segment.run = run
        try:
            self._close(run.id, error, None)
        except Exception:
            log.exception("telemetry: the run's span could not be ended")

    def queue_depth(self, depth: int) -> None:
        self.queue_depth_gauge.set(depth)

    def forked(self, source_session_id: str, session: Session, parent_trace: str | None) -> None:
        parent = _parent(parent_trace) if parent_trace else None
        linked = trace.get_current_span(parent).get_span_context() if parent else None
        links = [Link(linked, {"plait.link": "fork_parent"})] if linked and linked.is_valid else []
        span = self.tracer.start_span(
            "fork_session",
            links=links,
            attributes={
                "gen_ai.conversation.id": session.id,
                "plait.fork.source_session_id": source_session_id,
                "plait.fork.through_message_id": (
                    "" if session.fork_origin is None else session.fork_origin.fork_point_message_id
                ),
            },
        )
        span.end()

    # --- events -------------------------------------------------------------------------

    def _observe(self, event: RunEvent) -> None:
        segment = self._segments.get(_run_id(event))
        if segment is None:
            return
        if isinstance(event, ModelCallStarted):
            self._model_call_started(segment, event)
        elif isinstance(event, ModelCallEnded):
            self._model_call_ended(segment, event)
        elif isinstance(event, ToolDecided):
            self._tool_decided(segment, event)
        elif isinstance(event, ToolStarted):
            timed = self._tool_span(segment, event.call.id, event.call.name, event.call)
            timed.span.set_attribute("plait.tool.effect", event.effect)
            wait = segment.waits.pop(event.call.id, None)
            if wait is not None:  # approved while this process waited
                wait.end()
        elif isinstance(event, MessageSaved):
            self._message_saved(segment, event)
        elif isinstance(event, CompactionEvent):
            self._compaction(segment, event)
        elif isinstance(event, ReviewEvent):
            self._review(segment, event)
        elif isinstance(event, RecoveryEvent):
            self._recovery(segment, event)
        elif isinstance(event, RunEnded):
            segment.run = event.run

    def _model_call_started(self, segment: _Segment, event: ModelCallStarted) -> None:
        now = time.perf_counter()
        if segment.step is None or segment.step[0] != event.step:
            self._step_done(segment, now)
            segment.step = (event.step, now)
        if segment.chat is not None:  # an attempt that never came back
            segment.chat.span.end()
        model = segment.run.model or "unknown"
        reviewing = event.role == "reviewer" and segment.review is not None
        parent = segment.review if reviewing and segment.review is not None else segment.span
        span = self.tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": segment.provider,
                "gen_ai.request.model": model,
                "gen_ai.conversation.id": segment.run.session_id,
                "plait.run.id": segment.run.id,
                "plait.step": event.step,
                "plait.model.attempt": event.attempt,
                "plait.model.role": event.role,
            },
        )
        segment.chat = _Timed(span)

    def _model_call_ended(self, segment: _Segment, event: ModelCallEnded) -> None:
        timed, segment.chat = segment.chat, None
        if timed is None:
            return
        span = timed.span
        span.update_name(f"chat {event.model}")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": segment.provider,
            "gen_ai.request.model": event.model,
        }
        span.set_attribute("gen_ai.request.model", event.model)
        span.set_attribute("plait.model.role", event.role)
        if event.error_code:
            span.set_status(Status(StatusCode.ERROR, event.error_code))
            span.set_attribute("error.type", event.error_code)
            attributes["error.type"] = event.error_code
        else:
            reasons = ("tool_calls",) if event.tool_calls else ("stop",)
            span.set_attribute("gen_ai.response.finish_reasons", reasons)
            if event.response_model:
                span.set_attribute("gen_ai.response.model", event.response_model)
                attributes["gen_ai.response.model"] = event.response_model
            usage = event.usage
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
                span.set_attribute(
                    "gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens
                )
                span.set_attribute("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens)
                self.token_usage.record(
                    usage.input_tokens, {**attributes, "gen_ai.token.type": "input"}
                )
                self.token_usage.record(
                    usage.output_tokens, {**attributes, "gen_ai.token.type": "output"}
                )
        self.operation_duration.record(time.perf_counter() - timed.started, attributes)
        span.end()

    def _tool_span(self, segment: _Segment, call_id: str, name: str, call: Any) -> _Timed:
        timed = segment.tools.get(call_id)
        if timed is not None:
            return timed
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "plait.run.id": segment.run.id,
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = call.arguments_json
        parent = segment.span if segment.recovery is None else segment.recovery
        span = self.tracer.start_span(
            f"execute_tool {name}",
            context=trace.set_span_in_context(parent),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        timed = segment.tools[call_id] = _Timed(span)
        return timed

    def _tool_decided(self, segment: _Segment, event: ToolDecided) -> None:
        timed = self._tool_span(segment, event.call.id, event.call.name, event.call)
        timed.span.set_attribute("plait.gate.decision", event.verdict)
        timed.span.set_attribute("plait.gate.decided_by", event.decided_by)
        if event.reason:
            timed.span.set_attribute("plait.gate.reason", event.reason)
        if event.verdict == "needs_approval":
            segment.waits[event.call.id] = self.tracer.start_span(
                f"await_approval {event.call.name}",
                context=trace.set_span_in_context(timed.span),
                attributes={"gen_ai.tool.call.id": event.call.id, "plait.run.id": segment.run.id},
            )

    def _review(self, segment: _Segment, event: ReviewEvent) -> None:
        """``review {tool}``: the Reviewer role judging one call, a child of the call's
        ``execute_tool`` span and the parent of the reviewer's ``chat`` spans. The GenAI
        conventions have no operation for it; its outcome uses their evaluation
        attributes (``gen_ai.evaluation.*``, as on a ``gen_ai.evaluation.result`` event)."""
        call = event.call
        if event.phase == "started":
            if segment.review is not None:  # a review that never reported its end
                segment.review.end()
            timed = self._tool_span(segment, call.id, call.name, call)
            segment.review = self.tracer.start_span(
                f"review {call.name}",
                context=trace.set_span_in_context(timed.span),
                attributes={
                    "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": call.id,
                    "gen_ai.evaluation.name": _EVALUATION,
                    "plait.run.id": segment.run.id,
                    "plait.review.reviewer": event.reviewer,
                },
            )
            return
        span, segment.review = segment.review, None
        if span is None:
            return
        span.set_attribute("plait.review.reviewer", event.reviewer)
        span.set_attribute("plait.review.model_calls", event.model_calls)
        if event.verdict:
            outcome = {
                "gen_ai.evaluation.name": _EVALUATION,
                "gen_ai.evaluation.score.label": event.verdict,
                "gen_ai.evaluation.explanation": event.reason[:500],
            }
            span.set_attributes(outcome)
            span.set_attribute("plait.review.decision", event.verdict)
            span.set_attribute("plait.review.reason", event.reason[:500])
            span.add_event("gen_ai.evaluation.result", outcome)
        if event.error_code:
            span.set_status(Status(StatusCode.ERROR, event.error_code))
            span.set_attribute("error.type", event.error_code)
        span.end()

    def _recovery(self, segment: _Segment, event: RecoveryEvent) -> None:
        """``recover_run``: the inspection of the run's last persisted point and the
        settling of its open calls (their ``execute_tool`` spans are its children), in the
        segment that took the run over, linked to the stretch it continues."""
        if event.phase == "started":
            if segment.recovery is not None:
                segment.recovery.end()
            previous = segment.previous
            links = [Link(previous, {"plait.link": "previous_segment"})] if previous else []
            segment.recovery = self.tracer.start_span(
                "recover_run",
                context=trace.set_span_in_context(segment.span),
                links=links,
                attributes={
                    "plait.run.id": segment.run.id,
                    "gen_ai.conversation.id": segment.run.session_id,
                    "plait.recovery.session_version": event.session_version,
                    "plait.recovery.pending_calls": event.pending,
                    "plait.recovery.rerun": event.rerun,
                    "plait.recovery.reexecuted_idempotent": event.idempotent,
                    "plait.recovery.settled_unknown": event.unknown,
                    "plait.recovery.not_started": event.not_started,
                },
            )
            return
        span, segment.recovery = segment.recovery, None
        if span is None:
            return
        if event.status:
            span.set_attribute("plait.run.status", event.status)
        if event.error_code:
            span.set_status(Status(StatusCode.ERROR, event.error_code))
            span.set_attribute("error.type", event.error_code)
        span.end()

    def _message_saved(self, segment: _Segment, event: MessageSaved) -> None:
        message = event.stored.message
        if isinstance(message, ToolResultMessage):
            result = message.result
            timed = segment.tools.pop(result.call_id, None)
            if timed is None:  # a call settled without a decision here (recovery)
                timed = self._tool_span(segment, result.call_id, message.tool_name, None)
                segment.tools.pop(result.call_id, None)
            span = timed.span
            span.set_attribute("plait.tool.status", result.status.value)
            if result.reason:
                span.set_attribute("plait.tool.reason", result.reason[:500])
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.result", result.content)
            if result.status in _TOOL_ERRORS:
                span.set_status(Status(StatusCode.ERROR, result.status.value))
                span.set_attribute("error.type", f"tool_{result.status.value}")
            self.tool_duration.record(
                time.perf_counter() - timed.started,
                {"gen_ai.tool.name": message.tool_name, "plait.tool.status": result.status.value},
            )
            span.end()
            wait = segment.waits.pop(result.call_id, None)
            if wait is not None:
                wait.end()
        elif self.capture_content and isinstance(message, UserMessage):
            segment.span.set_attribute(
                "gen_ai.input.messages", _messages_json("user", message.text)
            )
        elif self.capture_content and isinstance(message, AssistantMessage) and message.text:
            segment.span.set_attribute(
                "gen_ai.output.messages", _messages_json("assistant", message.text)
            )

    def _compaction(self, segment: _Segment, event: CompactionEvent) -> None:
        if event.phase == "started":
            if segment.compaction is not None:
                segment.compaction.end()
            segment.compaction = self.tracer.start_span(
                "compaction",
                context=trace.set_span_in_context(segment.span),
                attributes={
                    "plait.run.id": segment.run.id,
                    "plait.compaction.trigger": event.trigger,
                    "plait.step": event.step,
                },
            )
            return
        span, segment.compaction = segment.compaction, None
        trigger = {"plait.compaction.trigger": event.trigger}
        self.compactions.add(1, {**trigger, "plait.compaction.outcome": event.phase})
        saved = None
        if event.tokens_before is not None and event.tokens_after is not None:
            saved = max(event.tokens_before - event.tokens_after, 0)
            if event.phase == "activated":
                self.tokens_saved.add(saved, {"plait.compaction.trigger": event.trigger})
        if span is None:
            return
        span.set_attribute("plait.compaction.outcome", event.phase)
        span.set_attribute("plait.compaction.generation", event.generation)
        if event.tokens_before is not None:
            span.set_attribute("plait.compaction.tokens_before", event.tokens_before)
        if event.tokens_after is not None:
            span.set_attribute("plait.compaction.tokens_after", event.tokens_after)
        if saved is not None:
            span.set_attribute("plait.compaction.tokens_saved", saved)
        if event.phase == "failed":
            span.set_status(Status(StatusCode.ERROR, event.detail[:200]))
            span.set_attribute("error.type", "compaction_failed")
        span.end()

    # --- the end of a segment -------------------------------------------------------------

    def _step_done(self, segment: _Segment, now: float) -> None:
        if segment.step is not None:
            self.step_duration.record(now - segment.step[1])
            segment.step = None

    def _close(self, run_id: str, error: BaseException | None, why: str | None) -> None:
        segment = self._segments.pop(run_id, None)
        if segment is None:
            return
        self._step_done(segment, time.perf_counter())
        code = why or (_error_code(error) if error is not None else None)
        open_spans = [t.span for t in segment.tools.values()]
        if segment.chat is not None:
            open_spans.append(segment.chat.span)
        if segment.compaction is not None:
            open_spans.append(segment.compaction)
        if segment.review is not None:
            open_spans.append(segment.review)
        if segment.recovery is not None:
            open_spans.append(segment.recovery)
        for span in open_spans:
            if code is not None:
                span.set_status(Status(StatusCode.ERROR, code))
                span.set_attribute("error.type", code)
            span.end()
        run = segment.run
        for wait in segment.waits.values():  # the run waits for a person from here
            wait.set_attribute("plait.run.status", run.status.value)
            wait.end()
        span = segment.span
        span.set_attribute("plait.run.status", run.status.value)
        span.set_attribute("gen_ai.usage.input_tokens", run.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", run.usage.output_tokens)
        span.set_attribute("plait.run.steps", run.usage.steps)
        if code is None and run.error is not None and run.status in _FAILED:
            code = run.error.code
        if code is not None:
            span.set_status(Status(StatusCode.ERROR, code))
            span.set_attribute("error.type", code)
        span.end()
        self.runs.add(1, {"plait.run.status": run.status.value})


def _run_id(event: RunEvent) -> str:
    return getattr(event, "run_id", "") or getattr(getattr(event, "run", None), "id", "")


def _error_code(error: BaseException) -> str:
    if isinstance(error, PlaitError):
        return error.code
    return type(error).__name__


def _messages_json(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])


def _span_exporter(name: str) -> SpanExporter | None:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        # lazy: the OTLP exporter (protobuf, ~75 ms), only when the otlp exporter is chosen
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    return None


def _metric_exporter(name: str) -> Any:
    if name == "console":
        return ConsoleMetricExporter()
    # lazy: the OTLP exporter (protobuf, ~75 ms), only when the otlp exporter is chosen
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()
