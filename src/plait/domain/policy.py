"""The deterministic tool policy: rules evaluated before any model is asked
(docs/design.md#governance).

A :class:`Policy` maps the facts of one validated call (:class:`CallFacts`: the tool, its
effect, the workspace paths it names, the sub-commands of a shell command) to an
:class:`Action`: ``allow``, ``review`` (ask the Reviewer role), ``approve`` (ask a person)
or ``deny``. Evaluation is pure and total:

1. limits (calls per run, argument size) exceeded → ``deny``;
2. a path outside the workspace → ``deny``;
3. each *subject* of the call is decided on its own: the call itself, or for a command
   tool every sub-command and every file it redirects output to. For a subject, the
   strictest of the matching rules wins (``deny`` > ``approve`` > ``review`` > ``allow``);
   with no matching rule, the defaults decide (protected paths, then ``read`` /
   ``write`` / ``command`` / ``other``);
4. the call gets the strictest action of its subjects, so allowing ``cd`` never allows
   what follows it. A command that could not be parsed is never allowed.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import field
from enum import StrEnum
from functools import lru_cache

from plait.domain.errors import ValidationError
from plait.domain.record import record

__all__ = [
    "PLAIT_CONFIG_FILES",
    "Action",
    "CallFacts",
    "Limits",
    "ParsedCommand",
    "Policy",
    "PolicyVerdict",
    "ReviewerConfig",
    "ToolRule",
    "glob_match",
    "pattern_match",
]


class Action(StrEnum):
    ALLOW = "allow"
    REVIEW = "review"
    APPROVE = "approve"
    DENY = "deny"

    @property
    def strictness(self) -> int:
        return _STRICTNESS[self]


_STRICTNESS = {Action.ALLOW: 0, Action.REVIEW: 1, Action.APPROVE: 2, Action.DENY: 3}


@lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    out, pos, length = [], 0, len(pattern)
    while pos < length:
        char = pattern[pos]
        if pattern.startswith("**/", pos):
            out.append("(?:.*/)?")
            pos += 3
        elif pattern.startswith("/**", pos) and pos + 3 == length:
            out.append("(?:/.*)?")
            pos += 3
        elif pattern.startswith("**", pos):
            out.append(".*")
            pos += 2
        elif char == "*":
            out.append("[^/]*")
            pos += 1
        elif char == "?":
            out.append("[^/]")
            pos += 1
        else:
            out.append(re.escape(char))
            pos += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def glob_match(path: str, pattern: str) -> bool:
    """Workspace-relative glob: ``*`` and ``?`` stay within one path segment, ``**``
    spans segments; ``deploy/**`` matches ``deploy`` and everything under it."""
    return _glob_regex(pattern).match(path) is not None


def pattern_match(words: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    """A command pattern is a list of words, each an ``fnmatch`` glob against the
    sub-command's word at that place. A final ``*`` word matches any remaining arguments
    (none included); otherwise the number of words must be equal."""
    if pattern and pattern[-1] == "*":
        head = pattern[:-1]
        if len(words) < len(head):
            return False
        return all(fnmatch.fnmatchcase(w, p) for w, p in zip(words, head, strict=False))
    if len(words) != len(pattern):
        return False
    return all(fnmatch.fnmatchcase(w, p) for w, p in zip(words, pattern, strict=True))


@record(kw_only=True)
class ToolRule:
    """One rule. ``tools`` are globs on tool names; ``paths`` (optional) restrict it to
    calls naming a matching workspace path; ``commands`` (optional) restrict it to
    sub-commands of a command tool matching one of the patterns (word lists)."""

    name: str
    action: Action
    tools: tuple[str, ...] = ("*",)
    paths: tuple[str, ...] = ()
    commands: tuple[tuple[str, ...], ...] = ()
    reason: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", Action(self.action))
        if not self.name:
            raise ValidationError("a policy rule needs a name")
        if not self.tools:
            raise ValidationError(f"rule {self.name!r}: tools must not be empty")

    def describe(self) -> str:
        parts = [f"{self.action.value}", "tools " + ", ".join(self.tools)]
        if self.paths:
            parts.append("paths " + ", ".join(self.paths))
        if self.commands:
            parts.append("commands " + ", ".join(" ".join(c) for c in self.commands))
        return f"{self.name}: " + "; ".join(parts)


@record(kw_only=True)
class Limits:
    max_calls_per_run: int | None = None
    """Tool calls one run may execute; the next is denied."""
    max_argument_bytes: int | None = None
    """Size of one call's arguments (JSON, UTF-8); a bigger call is denied."""


@record(kw_only=True)
class ReviewerConfig:
    """The Reviewer role's settings (its own model, instructions, model settings, budget
    share)."""

    model: str = ""
    """Model spec (or plait.toml name) of the reviewer; ``""``: the run's model."""
    instructions: str = ""
    """Extra instructions appended to the built-in reviewer instructions."""
    max_model_calls: int = 10
    """Share of the run's model-call budget the reviewer may use in one run."""
    max_corrections: int = 1
    timeout_seconds: float = 60.0
    max_output_tokens: int = 512
    history_messages: int = 12
    """How many recent messages (besides the user's) the reviewer sees."""


@record(kw_only=True)
class ParsedCommand:
    """A shell command split into what it runs. ``ok`` is False when it could not be
    parsed (``problem`` says why): such a command is never allowed."""

    ok: bool
    commands: tuple[tuple[str, ...], ...] = ()
    """Every simple command, at any depth (pipes, lists, subshells, substitutions)."""
    writes: tuple[str, ...] = ()
    """Files the command redirects output to (workspace-relative once resolved)."""
    unclear: tuple[str, ...] = ()
    """Write targets whose place cannot be known before running (``$VAR``, a ``cd``
    before them, ...): never allowed without a person."""
    problem: str = ""


@record(kw_only=True)
class CallFacts:
    """What the policy knows of one call. ``paths`` are workspace-relative POSIX paths;
    ``outside`` are the named paths that leave the workspace."""

    tool: str
    read_only: bool
    paths: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    command: ParsedCommand | None = None
    argument_bytes: int = 0
    calls_so_far: int = 0


@record(kw_only=True)
class PolicyVerdict:
    action: Action
    rule: str
    """``rules.NAME``, ``defaults.write``, ``protected``, ``limits.max_calls_per_run``..."""
    reason: str


_DEFAULT_PROTECTED = (".git/**", ".env", ".env.*")

PLAIT_CONFIG_FILES = ("plait.toml", "plait-policy.toml")
"""plait's own configuration at the workspace root (where ``plait init`` writes it and
plait reads it when run there): the model, the sandbox's settings, MCP server commands
and the tool policy of the next run on the host. Kept out of the agent's reach by
:attr:`Policy.protect_config`."""


@record(kw_only=True)
class Policy:
    """Rules plus defaults. :meth:`Policy.default` is the built-in, first-run-safe one."""

    rules: tuple[ToolRule, ...] = ()
    read: Action = Action.ALLOW
    write: Action = Action.ALLOW
    command: Action = Action.APPROVE
    other: Action = Action.APPROVE
    protected: tuple[str, ...] = _DEFAULT_PROTECTED
    protected_action: Action = Action.DENY
    protect_git: bool = True
    """No tool may create or change a git repository's config or hooks (nested ones and
    bare ones included), whatever the rules say: the host's git runs them later."""
    protect_config: bool = True
    """No tool may create or change plait's own configuration in the workspace
    (:data:`PLAIT_CONFIG_FILES`), whatever the rules say: the next run on the host reads
    it (an MCP server's command, the sandbox's settings, the policy itself)."""
    command_tools: tuple[str, ...] = ("run_command",)
    path_arguments: tuple[str, ...] = (
        "path",
        "paths",
        "file",
        "directory",
        "dir",
        "cwd",
        "source",
        "destination",
        "target",
    )
    limits: Limits = field(default_factory=Limits)
    reviewer: ReviewerConfig = field(default_factory=ReviewerConfig)
    source: str = "built-in default"

    def __post_init__(self) -> None:
        for name in ("read", "write", "command", "other", "protected_action"):
            object.__setattr__(self, name, Action(getattr(self, name)))
        names = [r.name for r in self.rules]
        for rule_name in names:
            if names.count(rule_name) > 1:
                raise ValidationError(
                    f"policy rule name {rule_name!r} is used twice", rule=rule_name
                )

    @classmethod
    def default(cls) -> Policy:
        return cls()

    @property
    def reviews(self) -> bool:
        """Whether any call can reach the Reviewer role (a rule or default says
        ``review``)."""
        actions = (self.read, self.write, self.command, self.other, self.protected_action)
        return Action.REVIEW in actions or any(r.action is Action.REVIEW for r in self.rules)

    def is_command_tool(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, p) for p in self.command_tools)

    def evaluate(self, facts: CallFacts) -> PolicyVerdict:
        """The action for one call, with the rule that decided and why."""
        limit = self._limits(facts)
        if limit is not None:
            return limit
        if facts.outside:
            return PolicyVerdict(
                action=Action.DENY,
                rule="workspace",
                reason=f"{facts.outside[0]!r} is outside the workspace",
            )
        verdicts = list(self._subjects(facts))
        top = max(v.action.strictness for v in verdicts)
        worst = [v for v in verdicts if v.action.strictness == top]
        reasons = "; ".join(dict.fromkeys(v.reason for v in worst))
        return PolicyVerdict(action=worst[0].action, rule=worst[0].rule, reason=reasons)

    def _limits(self, facts: CallFacts) -> PolicyVerdict | None:
        lim = self.limits
        if lim.max_calls_per_run is not None and facts.calls_so_far >= lim.max_calls_per_run:
            return PolicyVerdict(
                action=Action.DENY,
                rule="limits.max_calls_per_run",
                reason=f"the run already made its {lim.max_calls_per_run} tool calls",
            )
        if lim.max_argument_bytes is not None and facts.argument_bytes > lim.max_argument_bytes:
            return PolicyVerdict(
                action=Action.DENY,
                rule="limits.max_argument_bytes",
                reason=f"the arguments are {facts.argument_bytes} bytes, over the limit of "
                f"{lim.max_argument_bytes}",
            )
        return None

    def _subjects(self, facts: CallFacts) -> Iterable[PolicyVerdict]:
        tool_rules = [
            r for r in self.rules if any(fnmatch.fnmatchcase(facts.tool, t) for t in r.tools)
        ]
        if not self.is_command_tool(facts.tool) or facts.command is None:
            yield self._plain(facts, tool_rules)
            return
        cmd = facts.command
        if not cmd.ok:
            floor = max(self.command, Action.APPROVE, key=lambda action: action.strictness)
            yield PolicyVerdict(
                action=floor,
                rule="command.unparsable",
                reason=f"the command could not be parsed ({cmd.problem}); it is never "
                "allowed without a person",
            )
            return
        for words in cmd.commands:
            yield self._subcommand(words, tool_rules)
        for target in cmd.unclear:
            yield PolicyVerdict(
                action=max(self.write, Action.APPROVE, key=lambda action: action.strictness),
                rule="command.unclear_write",
                reason=f"the command writes to {target!r}, whose place cannot be known "
                "before it runs",
            )
        for target in (*cmd.writes, *facts.paths):
            yield self._plain(
                CallFacts(tool=facts.tool, read_only=False, paths=(target,)),
                [r for r in tool_rules if not r.commands and r.paths],
            )
        if not cmd.commands:
            yield PolicyVerdict(
                action=self.command, rule="defaults.command", reason="an empty command"
            )

    def _plain(self, facts: CallFacts, rules: list[ToolRule]) -> PolicyVerdict:
        if self.protect_config and not facts.read_only:
            for path in facts.paths:
                hit = next((n for n in PLAIT_CONFIG_FILES if glob_match(path, n)), None)
                if hit is not None:
                    return PolicyVerdict(
                        action=Action.DENY,
                        rule="protect_config",
                        reason=f"{path!r} is plait's own configuration, which the next run "
                        "on the host reads; no tool may change it (protect_config)",
                    )
        matching = [
            r
            for r in rules
            if not r.commands
            and (not r.paths or any(glob_match(path, g) for path in facts.paths for g in r.paths))
        ]
        if matching:
            return _rule_verdict(matching)
        if not facts.read_only:
            for path in facts.paths:
                hit = next((g for g in self.protected if glob_match(path, g)), None)
                if hit is not None:
                    return PolicyVerdict(
                        action=self.protected_action,
                        rule="protected",
                        reason=f"{path!r} is a protected path (matches {hit!r})",
                    )
        if facts.read_only:
            return PolicyVerdict(action=self.read, rule="defaults.read", reason="a read-only tool")
        if facts.paths:
            return PolicyVerdict(
                action=self.write, rule="defaults.write", reason="a write inside the workspace"
            )
        return PolicyVerdict(
            action=self.other,
            rule="defaults.other",
            reason=f"tool {facts.tool!r} has side effects outside the file rules",
        )

    def _subcommand(self, words: tuple[str, ...], rules: list[ToolRule]) -> PolicyVerdict:
        matching = [
            r
            for r in rules
            if not r.paths
            and (not r.commands or any(pattern_match(words, pat) for pat in r.commands))
        ]
        shown = " ".join(words)
        if matching:
            verdict = _rule_verdict(matching)
            return PolicyVerdict(
                action=verdict.action, rule=verdict.rule, reason=f"`{shown}`: {verdict.reason}"
            )
        return PolicyVerdict(
            action=self.command,
            rule="defaults.command",
            reason=f"`{shown}` matches no command rule",
        )


def _rule_verdict(rules: list[ToolRule]) -> PolicyVerdict:
    rule = max(rules, key=lambda rule: rule.action.strictness)
    return PolicyVerdict(
        action=rule.action,
        rule=f"rules.{rule.name}",
        reason=rule.reason or f"rule {rule.name!r} says {rule.action.value}",
    )
