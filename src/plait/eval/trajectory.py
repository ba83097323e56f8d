"""The trajectories of ``plait eval compaction``: long sessions as data, with their questions.

Each trajectory is a JSON file in ``plait/eval/trajectories/`` (package data). Its format:

``name``, ``shape``
    its name (the file's stem) and one line saying what it exercises.
``window``
    the context window, in tokens, the compacted arm measures against (the full-history
    arm uses the model's own window), so a session of a few tens of thousands of tokens
    compacts several times whatever model answers.
``events``
    the session, in order; each event is one complete unit, committed as the session
    grows: ``{"user": TEXT}``, ``{"assistant": TEXT}``, or a tool round trip ``{"call":
    TOOL, "args": {...}, "output": TEXT, "status": "succeeded" | "failed", "pad": N}``
    (``pad``: N characters of log lines appended to the output, the bulk real tool output
    has). ``{"repeat": N, "events": [...]}`` repeats its events N times with ``{i}``
    replaced by 1..N. Messages are numbered ``m1``, ``m2``, ... in order; a citation
    names these ids.
``constraints``
    ``{"id", "forbid", "tools"}``: a tool call of one of ``tools`` (default
    ``write_file`` and ``run_command``) whose arguments contain ``forbid`` violates it.
``questions``
    asked after the whole session, each on its own branch, with the same model and tools
    in both arms. ``{"id", "kind": "task", "text", "expect": [PATH...], "stale": [PATH...],
    "constraints": [ID...]}``: the model must continue the work by writing every
    ``expect`` path (and none of ``stale``, the paths of a decision since replaced);
    ``{"id", "kind": "evidence", "text", "answer", "evidence"}``: the answer must contain
    ``answer`` and cite a message whose raw text contains ``evidence``. ``find`` (a regular
    expression, group 1 the answer or the comma-separated paths) and ``query`` (recall
    words) tell the offline stand-in reader what to look for; a real model never sees them.
``files``
    optional ``{PATH: CONTENT}`` the ``read_file`` tool serves while questions run.
"""

from __future__ import annotations

import json
import re
from dataclasses import field
from importlib import resources
from typing import Any, Literal

from plait.domain.errors import ValidationError
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolStatus,
    UserMessage,
)
from plait.domain.record import record

__all__ = [
    "Constraint",
    "Question",
    "Trajectory",
    "load_trajectories",
    "parse_trajectory",
    "trajectory_names",
]

DEFAULT_CONSTRAINED_TOOLS = ("write_file", "run_command")
_PAD_LINE = "  [{n:04d}] worker ok: step completed, 0 warnings, cache hit\n"


@record
class Constraint:
    id: str
    forbid: str
    tools: tuple[str, ...] = DEFAULT_CONSTRAINED_TOOLS

    def violated_by(self, call: ToolCall) -> bool:
        return call.name in self.tools and self.forbid in call.arguments_json


@record
class Question:
    id: str
    kind: Literal["task", "evidence"]
    text: str
    find: str
    query: str
    expect: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    answer: str = ""
    evidence: str = ""


@record
class Trajectory:
    name: str
    shape: str
    window: int
    units: tuple[tuple[Message, ...], ...]
    """The session as complete units, in order."""
    questions: tuple[Question, ...]
    constraints: tuple[Constraint, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    @property
    def messages(self) -> list[Message]:
        return [m for unit in self.units for m in unit]

    def constraint(self, constraint_id: str) -> Constraint:
        return next(c for c in self.constraints if c.id == constraint_id)


def trajectory_names() -> list[str]:
    """The names of the shipped trajectories, sorted."""
    folder = resources.files("plait.eval") / "trajectories"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json"))


def load_trajectories(names: list[str] | None = None) -> list[Trajectory]:
    """The shipped trajectories named (all of them by default); an unknown name is a
    ValidationError listing the known ones."""
    known = trajectory_names()
    chosen = names or known
    for name in chosen:
        if name not in known:
            raise ValidationError(
                f"unknown trajectory {name!r}; known: {', '.join(known)}", trajectory=name
            )
    folder = resources.files("plait.eval") / "trajectories"
    return [
        parse_trajectory(json.loads((folder / f"{name}.json").read_text("utf-8")), name)
        for name in dict.fromkeys(chosen)
    ]


# --- parsing --------------------------------------------------------------------------------


def _fail(where: str, problem: str) -> ValidationError:
    return ValidationError(f"trajectory {where}: {problem}")


def _keys(data: Any, where: str, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _fail(where, f"must be an object, got {type(data).__name__}")
    missing = sorted(required - data.keys())
    if missing:
        raise _fail(where, f"missing {', '.join(missing)}")
    unknown = sorted(data.keys() - required - optional)
    if unknown:
        raise _fail(where, f"unknown key(s) {', '.join(unknown)}")
    return data


def _str(data: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value:
        raise _fail(where, f"{key} must be a non-empty string")
    return value


def _strs(data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(where, f"{key} must be a list of non-empty strings")
    return tuple(value)


def parse_trajectory(data: Any, name: str) -> Trajectory:
    """A trajectory from its decoded JSON (see the module docstring); a ValidationError
    names the trajectory, the place and what is wrong."""
    top = _keys(
        data, name, {"name", "shape", "window", "events", "questions"}, {"constraints", "files"}
    )
    if top["name"] != name:
        raise _fail(name, f"name {top['name']!r} differs from the file name")
    window = top["window"]
    if not isinstance(window, int) or isinstance(window, bool) or window < 1_000:
        raise _fail(name, f"window must be an integer of at least 1000 tokens, got {window!r}")
    constraints = tuple(
        _constraint(c, f"{name} constraints[{index}]")
        for index, c in enumerate(top.get("constraints", []))
    )
    questions = tuple(
        _question(q, f"{name} questions[{index}]", {c.id for c in constraints})
        for index, q in enumerate(top["questions"])
    )
    if not questions:
        raise _fail(name, "has no questions")
    if not isinstance(top["events"], list):
        raise _fail(name, "events must be a list")
    units: list[tuple[Message, ...]] = []
    for index, event in enumerate(_expand(top["events"], f"{name} events", {})):
        units.append(_unit(event, f"{name} event {index + 1}", sum(len(u) for u in units)))
    files = top.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise _fail(name, "files must map paths to text")
    return Trajectory(
        name=name,
        shape=_str(top, "shape", name),
        window=window,
        units=tuple(units),
        questions=questions,
        constraints=constraints,
        files=dict(files),
    )


def _constraint(data: Any, where: str) -> Constraint:
    constraint = _keys(data, where, {"id", "forbid"}, {"tools"})
    tools = _strs(constraint, "tools", where) or DEFAULT_CONSTRAINED_TOOLS
    return Constraint(
        id=_str(constraint, "id", where), forbid=_str(constraint, "forbid", where), tools=tools
    )


def _question(data: Any, where: str, constraint_ids: set[str]) -> Question:
    kind = data.get("kind") if isinstance(data, dict) else None
    common = {"id", "kind", "text", "find", "query"}
    if kind == "task":
        question = _keys(data, where, common | {"expect"}, {"stale", "constraints"})
        for cid in _strs(question, "constraints", where):
            if cid not in constraint_ids:
                raise _fail(where, f"names unknown constraint {cid!r}")
        if not _strs(question, "expect", where):
            raise _fail(where, "expect must name at least one path")
    elif kind == "evidence":
        question = _keys(data, where, common | {"answer", "evidence"}, set())
        _str(question, "answer", where), _str(question, "evidence", where)
    else:
        raise _fail(where, f"kind must be 'task' or 'evidence', got {kind!r}")
    try:
        re.compile(_str(question, "find", where))
    except re.error as exc:
        raise _fail(where, f"find is not a regular expression: {exc}") from exc
    return Question(
        id=_str(question, "id", where),
        kind=kind,
        text=_str(question, "text", where),
        find=question["find"],
        query=_str(question, "query", where),
        expect=_strs(question, "expect", where),
        stale=_strs(question, "stale", where),
        constraints=_strs(question, "constraints", where),
        answer=question.get("answer", ""),
        evidence=question.get("evidence", ""),
    )


def _substitute(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, text in values.items():
            value = value.replace("{" + key + "}", text)
        return value
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    return value


def _expand(events: list[Any], where: str, values: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, event in enumerate(events):
        here = f"{where}[{index}]"
        if isinstance(event, dict) and "repeat" in event:
            block = _keys(event, here, {"repeat", "events"}, set())
            count = block["repeat"]
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise _fail(here, f"repeat must be a positive integer, got {count!r}")
            if not isinstance(block["events"], list):
                raise _fail(here, "events must be a list")
            for number in range(1, count + 1):
                out += _expand(block["events"], here, {**values, "i": str(number)})
        else:
            out.append(_substitute(event, values))
    return out


def _unit(event: Any, where: str, before: int) -> tuple[Message, ...]:
    number = before + 1
    if isinstance(event, dict) and "user" in event:
        _keys(event, where, {"user"}, set())
        return (
            UserMessage(id=f"m{number}", text=_str(event, "user", where), created_at=float(number)),
        )
    if isinstance(event, dict) and "assistant" in event:
        _keys(event, where, {"assistant"}, set())
        text = _str(event, "assistant", where)
        return (AssistantMessage(id=f"m{number}", text=text, created_at=float(number)),)
    call = _keys(event, where, {"call", "args", "output"}, {"status", "pad"})
    tool, args = _str(call, "call", where), call["args"]
    if not isinstance(args, dict):
        raise _fail(where, "args must be an object")
    status = call.get("status", "succeeded")
    if status not in ("succeeded", "failed"):
        raise _fail(where, f"status must be 'succeeded' or 'failed', got {status!r}")
    pad = call.get("pad", 0)
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise _fail(where, f"pad must be a non-negative integer, got {pad!r}")
    output = call["output"] if isinstance(call["output"], str) else ""
    if pad:
        line_length = len(_PAD_LINE.format(n=0))
        lines = "".join(_PAD_LINE.format(n=k) for k in range(pad // line_length + 1))
        output += "\n" + lines[:pad]
    call_id = f"c{number}"
    return (
        AssistantMessage(
            id=f"m{number}",
            text="",
            created_at=float(number),
            tool_calls=(ToolCall.create(id=call_id, name=tool, arguments=args),),
        ),
        ToolResultMessage(
            id=f"m{number + 1}",
            tool_name=tool,
            created_at=float(number + 1),
            result=ToolResult(call_id=call_id, status=ToolStatus(status), content=output),
        ),
    )
