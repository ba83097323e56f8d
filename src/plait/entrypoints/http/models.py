"""Request and response bodies of the HTTP API (they make the OpenAPI document)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from plait.domain.text import ID_PATTERN, TEXT_PATTERN, id_problem, text_problem

__all__ = [
    "BudgetIn",
    "ErrorOut",
    "ForkIn",
    "MessageIn",
    "MessagesOut",
    "RunOut",
    "RunsOut",
    "SessionIn",
    "SessionOut",
    "SessionsOut",
    "Text",
]

_Strict = ConfigDict(extra="forbid")


def _text(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _id(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


Text = Annotated[str, AfterValidator(_text), Field(json_schema_extra={"pattern": TEXT_PATTERN})]
"""Text a client sends (no NUL, no lone surrogate: see :mod:`plait.domain.text`)."""
Id = Annotated[str, AfterValidator(_id), Field(json_schema_extra={"pattern": ID_PATTERN})]
"""An identifier a client sends (no control character, no lone surrogate)."""


class BudgetIn(BaseModel):
    """The run's limits (those left out: the server's defaults), as ``plait send``'s
    budget flags."""

    model_config = _Strict
    max_steps: int | None = Field(default=None, ge=1, le=10_000)
    deadline_seconds: float | None = Field(
        default=None, gt=0, le=86_400, description="counted from when a worker starts the run"
    )
    max_model_calls: int | None = Field(default=None, ge=1, le=100_000)
    max_total_tokens: int | None = Field(default=None, ge=1, le=2**53)
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="ceiling on the run's model spend in US dollars, from the model's "
        "declared prices; a model without prices cannot take one (400 config_error)",
    )
    tool_timeout_seconds: float | None = Field(default=None, gt=0, le=3_600)
    tool_output_cap_bytes: int | None = Field(default=None, ge=256, le=100_000_000)


class SessionIn(BaseModel):
    model_config = _Strict
    title: Text | None = Field(default=None, max_length=200)
    workspace: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=r"^(/[^\x00]*|[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*)$",
        description="a workspace name (segments of letters, digits, '.', '_', '-' joined "
        "by '/'): the directory of that name in the caller's own directory under the "
        "server's PLAIT_WORKSPACE_ROOT (created on demand; refused when the server has no "
        "workspace root); an admin may give an existing directory's absolute path instead",
    )


class MessageIn(BaseModel):
    model_config = _Strict
    text: Text = Field(min_length=1, max_length=100_000, pattern=r"\S")
    budget: BudgetIn | None = None
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="a JSON Schema the run's final answer must match (a typed answer); its "
        "validated value is the final assistant message's `output`",
    )
    mcp_servers: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None,
        max_length=100,
        description="the MCP servers (names from [mcp.servers]) whose tools the run is "
        "offered, recorded with it; null: every server of the worker; []: none",
    )


class ForkIn(BaseModel):
    model_config = _Strict
    through_message_id: Id = Field(min_length=1, max_length=200)
    request_id: Id = Field(min_length=1, max_length=200)


class ResolveIn(BaseModel):
    model_config = _Strict
    call_id: Id = Field(min_length=1, max_length=200)
    status: Literal["succeeded", "failed"]
    note: Text = Field(min_length=1, max_length=2000, pattern=r"\S")


class ForkOriginOut(BaseModel):
    parent_session_id: str
    fork_point_message_id: str


class SessionOut(BaseModel):
    session_id: str
    created_at: str | None
    workspace: str | None
    title: str | None
    model: str | None = None
    """The model spec the session remembers (its creation's, else its first run's)."""
    owner: str | None
    version: int
    active_run_id: str | None
    fork_origin: ForkOriginOut | None


class SessionsOut(BaseModel):
    sessions: list[SessionOut]
    next_before: str | None = None
    """Pass it as ``before`` for the next page (``null``: this was the last)."""


class MessagesOut(BaseModel):
    session_id: str
    messages: list[dict[str, Any]]
    next_after: int | None = Field(description="pass as ?after= for the next page; null at the end")


class RunErrorOut(BaseModel):
    code: str
    message: str


class LeaseOut(BaseModel):
    owner: str
    expires_at: str | None


class RunOut(BaseModel):
    run_id: str
    session_id: str
    status: Literal[
        "queued",
        "running",
        "awaiting_approval",
        "awaiting_resolution",
        "completed",
        "budget_exhausted",
        "failed",
        "cancelled",
    ]
    model: str
    started_at: str | None
    ended_at: str | None
    error: RunErrorOut | None
    usage: dict[str, int]
    budget: dict[str, Any]
    lease: LeaseOut | None
    cancel_requested: bool
    mcp_servers: list[str] | None = Field(
        default=None,
        description="the MCP servers the run chose (null: every server of its worker)",
    )
    policy: str | None = Field(
        default=None,
        description="the tool policy (its source) the run's calls are decided under: that "
        "of the process that last started or continued it (after an approval too)",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None, description="the JSON Schema the final answer must match, or null"
    )
    parent: dict[str, str] | None = Field(
        default=None,
        description="a sub-agent's run: the parent's call it answers "
        "({session_id, run_id, call_id}), or null",
    )


class RunsOut(BaseModel):
    runs: list[RunOut]


class SubAgentOut(BaseModel):
    session_id: str = Field(description="the child's session")
    run_id: str = Field(description="the child's run")
    parent_run_id: str = Field(description="the parent's run whose call started the child")
    call_id: str = Field(description="the parent's delegate call the child answers")
    agent: str = Field(description="the sub-agent's name")
    status: str = Field(description="the child run's status")


class SubAgentsOut(BaseModel):
    subagents: list[SubAgentOut]


class ErrorBody(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorOut(BaseModel):
    error: ErrorBody


class HealthOut(BaseModel):
    status: str


PUBLISHED: tuple[type[BaseModel], ...] = (
    SessionOut,
    SessionsOut,
    MessagesOut,
    RunOut,
    RunsOut,
    SubAgentsOut,
    ErrorOut,
)
"""The shapes published as JSON Schema (``plait schema``): the models the HTTP API
answers with, whose schemas the OpenAPI document holds under the same names."""


def json_schemas() -> dict[str, Any]:
    """``{name: JSON Schema}`` of the published shapes, references written as the OpenAPI
    document writes them (``#/components/schemas/NAME``)."""
    # lazy: pydantic's JSON Schema generator, for plait schema and the OpenAPI document only
    from pydantic.json_schema import models_json_schema

    _, top = models_json_schema(
        [(m, "serialization") for m in PUBLISHED], ref_template="#/components/schemas/{model}"
    )
    defs: dict[str, Any] = top["$defs"]
    return defs
