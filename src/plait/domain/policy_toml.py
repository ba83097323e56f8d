"""Parse a policy from TOML text (format: docs/policy.md).

Every problem raises :class:`~plait.domain.errors.PolicyError` naming the source, the
line (where it can be found) and the key, with what is accepted there.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any

from plait.domain.errors import PolicyError, ValidationError
from plait.domain.policy import Action, Limits, Policy, ReviewerConfig, ToolRule

__all__ = ["parse_policy"]

_ACTIONS = ", ".join(repr(a.value) for a in Action)
_TOP = {
    "version",
    "defaults",
    "protected",
    "protect_git",
    "protect_config",
    "limits",
    "reviewer",
    "rules",
    "tools",
}
_DEFAULTS = {"read", "write", "command", "other", "protected"}
_TOOLS = {"command", "path_arguments"}
_LIMITS = {"max_calls_per_run", "max_argument_bytes"}
_REVIEWER = {
    "model",
    "instructions",
    "max_model_calls",
    "max_corrections",
    "timeout_seconds",
    "max_output_tokens",
    "history_messages",
}
_RULE = {"name", "action", "tools", "paths", "commands", "reason"}


class _Ctx:
    def __init__(self, text: str, source: str) -> None:
        self.lines = text.splitlines()
        self.source = source

    def fail(
        self, key: str, problem: str, *, table: str | None = None, index: int = 0
    ) -> PolicyError:
        line = self._line(table, index, key.rsplit(".", 1)[-1])
        where = f"{self.source}, line {line}" if line else self.source
        return PolicyError(f"{where}: {key}: {problem}", source=self.source, key=key, line=line)

    def _line(self, table: str | None, index: int, leaf: str) -> int | None:
        """Best effort: the line of ``leaf = ...`` inside ``[table]`` (or the
        ``index``-th ``[[table]]``); the table's header line if the key is absent."""
        current: str | None = None
        counts: dict[str, int] = {}
        header: int | None = None
        key_re = re.compile(rf"^\s*[\"']?{re.escape(leaf)}[\"']?\s*=")
        for number, raw in enumerate(self.lines, 1):
            stripped = raw.strip()
            header_match = re.match(r"^\[\[?\s*([^\]]+?)\s*\]", stripped)
            if header_match:
                current = header_match.group(1)
                nth = counts.get(current, -1) + 1 if stripped.startswith("[[") else 0
                counts[current] = nth
                if current == table and nth == index:
                    header = number
                continue
            here = current == table and (table is None or counts.get(table) == index)
            if here and key_re.match(raw):
                return number
        return header


def _str_list(
    ctx: _Ctx, value: Any, key: str, table: str | None, index: int = 0
) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ctx.fail(key, "must be a list of non-empty strings", table=table, index=index)
    return tuple(value)


def _action(ctx: _Ctx, value: Any, key: str, table: str | None, index: int = 0) -> Action:
    try:
        return Action(value)
    except ValueError:
        raise ctx.fail(
            key, f"unknown action {value!r}; accepted: {_ACTIONS}", table=table, index=index
        ) from None


def _check_keys(
    ctx: _Ctx,
    data: dict[str, Any],
    allowed: set[str],
    prefix: str,
    table: str | None,
    index: int = 0,
) -> None:
    for key in data:
        if key not in allowed:
            raise ctx.fail(
                f"{prefix}{key}",
                f"unknown key; accepted: {', '.join(sorted(allowed))}",
                table=table,
                index=index,
            )


def _int(ctx: _Ctx, value: Any, key: str, table: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ctx.fail(key, f"must be an integer >= {minimum}, got {value!r}", table=table)
    return value


def _rule(ctx: _Ctx, raw: Any, number: int) -> ToolRule:
    key = f"rules[{number}]"
    if not isinstance(raw, dict):
        raise ctx.fail(key, "must be a table ([[rules]])", table="rules", index=number)
    _check_keys(ctx, raw, _RULE, f"{key}.", "rules", number)
    for required in ("name", "action"):
        if required not in raw:
            raise ctx.fail(f"{key}.{required}", "is required", table="rules", index=number)
    name = raw["name"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise ctx.fail(
            f"{key}.name",
            "must be 1-64 letters, digits, '_', '.', '-'",
            table="rules",
            index=number,
        )
    commands: list[tuple[str, ...]] = []
    for pattern in (
        _str_list(ctx, raw.get("commands", []), f"{key}.commands", "rules", number)
        if "commands" in raw
        else ()
    ):
        try:
            words = tuple(shlex.split(pattern))
        except ValueError as exc:
            raise ctx.fail(
                f"{key}.commands", f"pattern {pattern!r}: {exc}", table="rules", index=number
            ) from None
        if not words:
            raise ctx.fail(
                f"{key}.commands", "a pattern must not be empty", table="rules", index=number
            )
        commands.append(words)
    reason = raw.get("reason", "")
    if not isinstance(reason, str):
        raise ctx.fail(f"{key}.reason", "must be a string", table="rules", index=number)
    return ToolRule(
        name=name,
        action=_action(ctx, raw["action"], f"{key}.action", "rules", number),
        tools=_str_list(ctx, raw.get("tools", ["*"]), f"{key}.tools", "rules", number),
        paths=_str_list(ctx, raw["paths"], f"{key}.paths", "rules", number)
        if "paths" in raw
        else (),
        commands=tuple(commands),
        reason=reason,
    )


def _table(ctx: _Ctx, data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ctx.fail(name, f"must be a table ([{name}])", table=None)
    return value


def _get_int(
    ctx: _Ctx, raw: dict[str, Any], table: str, key: str, default: int | None, minimum: int = 1
) -> int | None:
    if key not in raw:
        return default
    return _int(ctx, raw[key], f"{table}.{key}", table, minimum=minimum)


def _reviewer(ctx: _Ctx, raw: dict[str, Any]) -> ReviewerConfig:
    _check_keys(ctx, raw, _REVIEWER, "reviewer.", "reviewer")
    reviewer = ReviewerConfig()
    instructions = raw.get("instructions", reviewer.instructions)
    if not isinstance(instructions, str):
        raise ctx.fail("reviewer.instructions", "must be a string", table="reviewer")
    model = raw.get("model", reviewer.model)
    if not isinstance(model, str) or (model != model.strip()):
        raise ctx.fail(
            "reviewer.model",
            'must be a model spec or a plait.toml model name (e.g. "anthropic:claude-haiku-4-5")',
            table="reviewer",
        )
    timeout = raw.get("timeout_seconds", reviewer.timeout_seconds)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ctx.fail("reviewer.timeout_seconds", "must be a positive number", table="reviewer")
    ints = {
        k: _get_int(
            ctx, raw, "reviewer", k, getattr(reviewer, k), 0 if k != "max_model_calls" else 1
        )
        for k in ("max_model_calls", "max_corrections", "max_output_tokens", "history_messages")
    }
    return ReviewerConfig(
        model=model,
        instructions=instructions,
        max_model_calls=ints["max_model_calls"] or reviewer.max_model_calls,
        max_corrections=ints["max_corrections"] or 0,
        timeout_seconds=float(timeout),
        max_output_tokens=ints["max_output_tokens"] or reviewer.max_output_tokens,
        history_messages=ints["history_messages"] or 0,
    )


def _defaults(ctx: _Ctx, data: dict[str, Any]) -> dict[str, Action]:
    raw = _table(ctx, data, "defaults")
    _check_keys(ctx, raw, _DEFAULTS, "defaults.", "defaults")
    base = Policy.default()
    out: dict[str, Action] = {}
    for key in _DEFAULTS:
        name = "protected_action" if key == "protected" else key
        out[name] = (
            _action(ctx, raw[key], f"defaults.{key}", "defaults")
            if key in raw
            else getattr(base, name)
        )
    return out


def _lists(ctx: _Ctx, data: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    tools = _table(ctx, data, "tools")
    _check_keys(ctx, tools, _TOOLS, "tools.", "tools")
    base = Policy.default()
    out = {
        "protected": base.protected,
        "command_tools": base.command_tools,
        "path_arguments": base.path_arguments,
    }
    if "protected" in data:
        out["protected"] = _str_list(ctx, data["protected"], "protected", None)
    if "command" in tools:
        out["command_tools"] = _str_list(ctx, tools["command"], "tools.command", "tools")
    if "path_arguments" in tools:
        key = "tools.path_arguments"
        out["path_arguments"] = _str_list(ctx, tools["path_arguments"], key, "tools")
    return out


def _rules(ctx: _Ctx, data: dict[str, Any]) -> tuple[ToolRule, ...]:
    raw = data.get("rules", [])
    if not isinstance(raw, list):
        raise ctx.fail("rules", "must be an array of tables ([[rules]])", table=None)
    rules = tuple(_rule(ctx, rule, number) for number, rule in enumerate(raw))
    seen: set[str] = set()
    for number, rule in enumerate(rules):
        if rule.name in seen:
            problem = f"{rule.name!r} is used by an earlier rule"
            raise ctx.fail(f"rules[{number}].name", problem, table="rules", index=number)
        seen.add(rule.name)
    return rules


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """A :class:`Policy` from TOML text; ``source`` names it in errors."""
    ctx = _Ctx(text, source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{source}: not valid TOML: {exc}", source=source) from None
    _check_keys(ctx, data, _TOP, "", None)
    version = data.get("version")
    if version != 1:
        problem = f"must be 1 (got {version!r}); add `version = 1` at the top"
        raise ctx.fail("version", problem, table=None)
    limits = _table(ctx, data, "limits")
    _check_keys(ctx, limits, _LIMITS, "limits.", "limits")
    defaults, lists = _defaults(ctx, data), _lists(ctx, data)
    protect_git = data.get("protect_git", True)
    if not isinstance(protect_git, bool):
        raise ctx.fail("protect_git", f"must be true or false, got {protect_git!r}", table=None)
    protect_config = data.get("protect_config", True)
    if not isinstance(protect_config, bool):
        problem = f"must be true or false, got {protect_config!r}"
        raise ctx.fail("protect_config", problem, table=None)
    try:
        return Policy(
            rules=_rules(ctx, data),
            read=defaults["read"],
            write=defaults["write"],
            command=defaults["command"],
            other=defaults["other"],
            protected_action=defaults["protected_action"],
            protected=lists["protected"],
            protect_git=protect_git,
            protect_config=protect_config,
            command_tools=lists["command_tools"],
            path_arguments=lists["path_arguments"],
            limits=Limits(
                max_calls_per_run=_get_int(ctx, limits, "limits", "max_calls_per_run", None),
                max_argument_bytes=_get_int(ctx, limits, "limits", "max_argument_bytes", None),
            ),
            reviewer=_reviewer(ctx, _table(ctx, data, "reviewer")),
            source=source,
        )
    except ValidationError as exc:
        raise PolicyError(f"{source}: {exc.message}", source=source) from exc
