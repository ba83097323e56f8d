"""The scripted-model file format: values, loading and validation.

The reference for users is ``docs/scripted-model.md``. Every problem is reported as a
:class:`~plait.domain.errors.ScriptError` whose message names the file, the role, the
1-based turn number and the offending key, so a script author can fix it without reading
this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import field, fields
from pathlib import Path
from typing import Any, Final

from plait.application.ports import ModelCapabilities, ModelRole
from plait.domain.errors import ModelErrorCode, ScriptError
from plait.domain.record import record
from plait.testing._script_where import (
    Where,
    check_json,
    check_keys,
    expect,
    suggest,
    type_name,
)

__all__ = [
    "DEFAULT_CAPABILITIES",
    "MALFORMED_KINDS",
    "SCRIPT_VERSION",
    "Script",
    "ScriptedCall",
    "ScriptedError",
    "Turn",
    "load_script",
    "parse_script",
]

SCRIPT_VERSION: Final = 1
ROLES: Final[tuple[ModelRole, ...]] = ("assistant", "reviewer", "summarizer")
MALFORMED_KINDS: Final = (
    "bad_json",
    "unknown_tool",
    "schema_mismatch",
    "duplicate_ids",
    "missing_id",
)
DEFAULT_CAPABILITIES: Final = ModelCapabilities(
    tool_calls=True,
    structured_output=True,
    streaming=False,
    parallel_tool_calls=True,
    context_window=128_000,
    max_output_tokens=8_192,
)
DEFAULT_STATUS: Final[Mapping[str, int]] = {
    ModelErrorCode.CONTEXT_WINDOW_EXCEEDED: 400,
    ModelErrorCode.RATE_LIMITED: 429,
    ModelErrorCode.AUTHENTICATION: 401,
    ModelErrorCode.TRANSIENT: 503,
    ModelErrorCode.INVALID_REQUEST: 400,
}

_TOP_KEYS: Final = ("version", "model", "capabilities", *ROLES)
_TURN_KEYS: Final = ("text", "tool_calls", "structured", "error", "malformed", "usage", "rejected")
_FORM_KEYS: Final = ("text", "tool_calls", "structured", "error", "malformed")
_CALL_KEYS: Final = ("name", "arguments", "raw_arguments", "id")
_ERROR_KEYS: Final = ("code", "message", "status", "body")
_USAGE_KEYS: Final = ("input_tokens", "output_tokens")
# Pairs of forms a turn may not combine; ``error`` combines with nothing (checked apart).
_CONFLICTS: Final = (
    ("tool_calls", "structured"),
    ("malformed", "tool_calls"),
    ("malformed", "structured"),
)


@record(kw_only=True)
class ScriptedCall:
    """One tool call of a turn.

    ``arguments`` is sent as a fresh dict; ``raw_arguments`` (when set) is sent as that exact
    text instead. With ``auto_id`` the id is generated as ``call_{turn}_{position}``;
    otherwise ``id`` is sent as given, and ``None`` sends a call without an id.
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    id: str | None = None
    auto_id: bool = True


@record(kw_only=True)
class ScriptedError:
    """A provider failure to raise as :class:`~plait.domain.errors.ModelError`."""

    code: str
    """A normalized :class:`~plait.domain.errors.ModelErrorCode` value."""
    message: str | None = None
    status: int | None = None
    body: Any = None


@record(kw_only=True)
class Turn:
    """One scripted answer (or failure) of a role."""

    text: str | None = None
    tool_calls: tuple[ScriptedCall, ...] = ()
    structured: Any = None
    has_structured: bool = False
    error: ScriptedError | None = None
    malformed: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    rejected: bool = False
    """The engine will not accept this turn as history and will ask again within the same
    step (errors, malformed output, syntactically invalid calls, or ``rejected: true``)."""


@record(kw_only=True)
class Script:
    """A validated script: the turns each role replays, in order."""

    source: str = "<script>"
    model: str | None = None
    capabilities: ModelCapabilities = DEFAULT_CAPABILITIES
    assistant: tuple[Turn, ...] = ()
    reviewer: tuple[Turn, ...] = ()
    summarizer: tuple[Turn, ...] = ()

    def turns(self, role: ModelRole) -> tuple[Turn, ...]:
        if role == "assistant":
            return self.assistant
        if role == "reviewer":
            return self.reviewer
        return self.summarizer


# --- loading --------------------------------------------------------------------------------


def load_script(path: str | os.PathLike[str]) -> Script:
    """Read and validate a script file (``.json``, ``.yaml`` or ``.yml``).

    Raises :class:`~plait.domain.errors.ScriptError` for a missing or unreadable file, a
    syntax error (with the parser's line and column) or an invalid script.
    """
    source = os.fspath(path)
    suffix = Path(source).suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ScriptError(
            f"script file {source} must end in .json, .yaml or .yml, not {suffix or 'nothing'}",
            file=source,
        )
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ScriptError(f"script file not found: {source}", file=source) from exc
    except UnicodeDecodeError as exc:
        raise ScriptError(
            f"script file {source} is not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} "
            f"at offset {exc.start}); save it as UTF-8",
            file=source,
        ) from exc
    except OSError as exc:
        raise ScriptError(
            f"cannot read script file {source}: {exc.strerror or type(exc).__name__}", file=source
        ) from exc
    data = _parse_json(text, source) if suffix == ".json" else _parse_yaml(text, source)
    return parse_script(data, source=source)


def _parse_json(text: str, source: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptError(
            f"invalid JSON in {source} at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            file=source,
            line=exc.lineno,
            column=exc.colno,
        ) from exc


def _parse_yaml(text: str, source: str) -> object:
    # lazy: PyYAML (~60 ms): only scripts written in YAML pay for it
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        if mark is None:
            raise ScriptError(f"invalid YAML in {source}: {problem}", file=source) from exc
        line, column = mark.line + 1, mark.column + 1
        raise ScriptError(
            f"invalid YAML in {source} at line {line}, column {column}: {problem}",
            file=source,
            line=line,
            column=column,
        ) from exc


def parse_script(data: object, *, source: str = "<script>") -> Script:
    """Validate already decoded script data (the shape of a script file) into a Script."""
    where = Where(source)
    if not isinstance(data, dict):
        where.fail(f"script {source} must be a mapping with a 'version' key, got {type_name(data)}")
    check_keys(data, _TOP_KEYS, where)
    if "version" not in data:
        where.fail(f"missing required key 'version' in {source}", key="version")
    version = data["version"]
    if version != SCRIPT_VERSION or isinstance(version, bool):
        where.fail(
            f"unsupported script version {version!r} in {source} (supported: {SCRIPT_VERSION})",
            key="version",
        )
    model = data.get("model")
    if model is not None:
        expect(model, str, "model", where)
    roles: dict[str, tuple[Turn, ...]] = {}
    for role in ROLES:
        turns = data.get(role, [])
        expect(turns, list, role, where)
        roles[role] = tuple(
            _parse_turn(turn, Where(source, role, n)) for n, turn in enumerate(turns, 1)
        )
    return Script(
        source=source,
        model=model,
        capabilities=_parse_capabilities(data.get("capabilities", {}), where),
        assistant=roles["assistant"],
        reviewer=roles["reviewer"],
        summarizer=roles["summarizer"],
    )


def _parse_capabilities(value: object, where: Where) -> ModelCapabilities:
    expect(value, dict, "capabilities", where)
    assert isinstance(value, dict)
    names = tuple(f.name for f in fields(ModelCapabilities))
    inner = where.inside("capabilities")
    check_keys(value, names, inner)
    for key, item in value.items():
        if key.startswith("price_"):
            if item is not None and (
                not isinstance(item, int | float) or isinstance(item, bool) or item < 0
            ):
                inner.fail(
                    f"{key!r} in {inner} must be a number of dollars (0 or more) or null, "
                    f"got {item!r}",
                    key=key,
                )
        elif key in ("context_window", "max_output_tokens"):
            if item is not None and (
                not isinstance(item, int) or isinstance(item, bool) or item < 1
            ):
                inner.fail(
                    f"{key!r} in {inner} must be a positive integer or null, got {item!r}",
                    key=key,
                )
        else:
            expect(item, bool, key, inner)
    merged = {f: getattr(DEFAULT_CAPABILITIES, f) for f in names} | value
    return ModelCapabilities(**merged)


def _parse_turn(value: object, where: Where) -> Turn:
    if not isinstance(value, dict):
        where.fail(f"{where} must be a mapping, got {type_name(value)}")
    check_keys(value, _TURN_KEYS, where)
    forms = [key for key in _FORM_KEYS if key in value]
    if not forms:
        where.fail(f"{where} has none of the turn forms: {', '.join(_FORM_KEYS)}")
    if "error" in value and len(value) > 1:
        other = next(k for k in value if k != "error")
        where.fail(f"'error' cannot be combined with {other!r} in {where}", key=other)
    for first, second in _CONFLICTS:
        if first in value and second in value:
            where.fail(f"{first!r} cannot be combined with {second!r} in {where}", key=second)
    if where.role != "assistant":
        for key in ("tool_calls", "malformed"):
            if key in value:
                where.fail(f"{key!r} is only allowed in assistant turns ({where})", key=key)

    text = value.get("text")
    if text is not None:
        expect(text, str, "text", where)
    if "structured" in value:
        check_json(value["structured"], "structured", where)
    calls: tuple[ScriptedCall, ...] = ()
    if "tool_calls" in value:
        expect(value["tool_calls"], list, "tool_calls", where)
        calls = tuple(
            _parse_call(call, Where(where.source, where.role, where.turn, k))
            for k, call in enumerate(value["tool_calls"], 1)
        )
    error = _parse_error(value["error"], where) if "error" in value else None
    malformed = None
    if "malformed" in value:
        malformed = value["malformed"]
        expect(malformed, str, "malformed", where)
        if malformed not in MALFORMED_KINDS:
            where.fail(
                f"unknown malformed kind {malformed!r} in {where}"
                f"{suggest(malformed, MALFORMED_KINDS)} (kinds: {', '.join(MALFORMED_KINDS)})",
                key="malformed",
            )
    input_tokens, output_tokens = _parse_usage(value.get("usage"), where)
    rejected = value.get("rejected")
    if rejected is None:
        rejected = error is not None or malformed is not None or _invalid_calls(calls)
    else:
        expect(rejected, bool, "rejected", where)
    return Turn(
        text=text,
        tool_calls=calls,
        structured=value.get("structured"),
        has_structured="structured" in value,
        error=error,
        malformed=malformed,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        rejected=rejected,
    )


def _parse_call(value: object, where: Where) -> ScriptedCall:
    if not isinstance(value, dict):
        where.fail(f"{where} must be a mapping, got {type_name(value)}")
    check_keys(value, _CALL_KEYS, where)
    if "name" not in value:
        where.fail(f"missing required key 'name' in {where}", key="name")
    name = value["name"]
    expect(name, str, "name", where)
    if not name:
        where.fail(f"'name' in {where} must not be empty", key="name")
    if "arguments" in value and "raw_arguments" in value:
        where.fail(f"'arguments' cannot be combined with 'raw_arguments' in {where}")
    arguments = value.get("arguments", {})
    expect(arguments, dict, "arguments", where)
    check_json(arguments, "arguments", where)
    raw = value.get("raw_arguments")
    if "raw_arguments" in value:
        expect(raw, str, "raw_arguments", where)
    call_id = value.get("id")
    if call_id is not None:
        expect(call_id, str, "id", where)
    return ScriptedCall(
        name=name, arguments=arguments, raw_arguments=raw, id=call_id, auto_id="id" not in value
    )


def _invalid_calls(calls: tuple[ScriptedCall, ...]) -> bool:
    """Calls any engine must reject, whatever the tools: broken or non-object argument
    text, a missing id, an id repeated within the turn."""
    ids = [c.id for c in calls if not c.auto_id]
    if None in ids or len(set(ids)) != len(ids):
        return True
    for call in calls:
        if call.raw_arguments is not None:
            try:
                decoded = json.loads(call.raw_arguments)
            except ValueError:
                return True
            if not isinstance(decoded, dict):
                return True
    return False


def _parse_error(value: object, where: Where) -> ScriptedError:
    spec: dict[str, Any] = {"code": value} if isinstance(value, str) else {}
    if not spec:
        if not isinstance(value, dict):
            where.fail(
                f"'error' in {where} must be a code name or a mapping, got {type_name(value)}",
                key="error",
            )
        inner = where.inside("error")
        check_keys(value, _ERROR_KEYS, inner)
        if "code" not in value:
            inner.fail(f"missing required key 'code' in {inner}", key="code")
        spec = value
        expect(spec["code"], str, "code", inner)
        if spec.get("message") is not None:
            expect(spec["message"], str, "message", inner)
        if spec.get("status") is not None:
            expect(spec["status"], int, "status", inner)
        check_json(spec.get("body"), "body", inner)
    code = str(spec["code"]).upper()
    if code not in ModelErrorCode.ALL:
        names = tuple(sorted(c.lower() for c in ModelErrorCode.ALL))
        where.fail(
            f"unknown error code {spec['code']!r} in {where}"
            f"{suggest(code.lower(), names)} (codes: {', '.join(names)})",
            key="error",
        )
    return ScriptedError(
        code=code, message=spec.get("message"), status=spec.get("status"), body=spec.get("body")
    )


def _parse_usage(value: object, where: Where) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    expect(value, dict, "usage", where)
    assert isinstance(value, dict)
    inner = where.inside("usage")
    check_keys(value, _USAGE_KEYS, inner)
    counts: list[int | None] = []
    for key in _USAGE_KEYS:
        count = value.get(key)
        if count is not None:
            expect(count, int, key, inner)
            if count < 0:
                inner.fail(f"{key!r} in {inner} must not be negative, got {count}", key=key)
        counts.append(count)
    return counts[0], counts[1]
