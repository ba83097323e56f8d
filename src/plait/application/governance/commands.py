"""Split a shell command into every simple command it would run, with a real parser.

``bashlex`` (a pure-Python port of bash's own grammar) parses the string; we walk the tree
and collect each simple command at any depth: lists (``&&``, ``||``, ``;``, newlines),
pipelines, subshells and brace groups, ``if``/``for``/``while`` bodies, function bodies,
command and process substitutions (``$(...)``, backticks, ``<(...)``), plus the files its
redirections write to. Anything the parser cannot handle makes the command *unparsed*,
which the policy never allows.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from plait.domain.policy import ParsedCommand

__all__ = ["parse_command"]

_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_MAX_COMMAND_CHARS = 100_000


@lru_cache(maxsize=512)  # bashlex takes milliseconds; a recovery or resume asks again
def parse_command(command: str) -> ParsedCommand:
    """The simple commands (as word tuples, assignments first) and write targets of
    ``command``; ``ok=False`` with the parser's complaint when it cannot be parsed."""
    if not isinstance(command, str):
        return ParsedCommand(ok=False, problem="the command is not a string")
    if len(command) > _MAX_COMMAND_CHARS:
        return ParsedCommand(ok=False, problem=f"longer than {_MAX_COMMAND_CHARS} characters")
    if "\x00" in command:
        return ParsedCommand(ok=False, problem="contains a NUL character")
    if not command.strip():
        return ParsedCommand(ok=True)
    # lazy: bashlex costs ~150 ms to import and only a policy with a command rule reaches
    # this line (Runtime.open stays fast)
    import bashlex  # type: ignore[import-untyped]

    try:
        trees = bashlex.parse(command)
    except Exception as exc:  # bashlex raises its own errors, NotImplementedError, ...
        return ParsedCommand(ok=False, problem=f"{type(exc).__name__}: {exc}".strip())
    commands: list[tuple[str, ...]] = []
    writes: list[str] = []
    try:
        for tree in trees:
            _walk(tree, commands, writes)
    except _Unsupported as exc:
        return ParsedCommand(ok=False, problem=str(exc))
    return ParsedCommand(ok=True, commands=tuple(commands), writes=tuple(writes))


class _Unsupported(Exception):
    pass


def _walk(node: Any, commands: list[tuple[str, ...]], writes: list[str]) -> None:
    kind = getattr(node, "kind", None)
    if kind == "command":
        words = tuple(
            str(p.word) for p in node.parts if getattr(p, "kind", None) in ("word", "assignment")
        )
        if words:
            commands.append(words)
    elif kind == "redirect":
        target = node.output
        if node.type in _WRITE_REDIRECTS and getattr(target, "kind", None) == "word":
            writes.append(str(target.word))
    elif kind is None:
        raise _Unsupported(f"unexpected parse node {type(node).__name__}")
    for attr in ("parts", "list", "command", "output", "heredoc"):
        child = getattr(node, attr, None)
        if isinstance(child, list):
            for part in child:
                _walk(part, commands, writes)
        elif child is not None and hasattr(child, "kind"):
            _walk(child, commands, writes)
