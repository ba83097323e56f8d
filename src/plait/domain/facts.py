"""Exact facts harvested from raw history without a model, and explicit user constraints.

A summarizer paraphrases; these do not. Files read, written and edited (with the last
content hash a tool reported), commands with their exit status, failing tests named in
tool output, and explicit user requirements, each tied to its source message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from plait.domain.summary import CommandFact, Constraint, Facts, FailingTest, FileAction, FileFact

__all__ = [
    "MAX_COMMANDS",
    "MAX_FAILING_TESTS",
    "MAX_FILES",
    "cap_facts",
    "constraints_of",
    "extract_constraints",
    "harvest_facts",
    "merge_facts",
]

MAX_FILES = 200
MAX_COMMANDS = 100
MAX_FAILING_TESTS = 100
"""The newest facts of each kind a summary record keeps; older ones stay in the raw
history, where the recall tool's search finds them."""

_FILE_TOOLS: dict[str, FileAction] = {
    "read_file": "read",
    "write_file": "written",
    "create_file": "written",
    "edit_file": "edited",
    "apply_patch": "edited",
}
_COMMAND_TOOLS = frozenset({"run_command", "run_tests", "shell", "bash", "exec", "command"})
_SHA = re.compile(r"sha256[ :]+(?:sha256:)?([0-9a-f]{64})")
_EXIT = re.compile(
    r"(?:exit(?:ed)?(?: with)?(?: status| code)?|return(?:ed)? code|returncode)[ :=]+(-?\d+)",
    re.IGNORECASE,
)
_TESTS = (
    re.compile(r"^FAILED ([\w./\-]+::[^\s]+)", re.MULTILINE),  # pytest summary
    re.compile(r"^([\w./\-]+::[^\s]+) FAILED", re.MULTILINE),  # pytest -v
    re.compile(r"^(?:FAIL|ERROR): (\w+ \([\w.]+\))", re.MULTILINE),  # unittest
    re.compile(r"^--- FAIL: ([\w/]+)", re.MULTILINE),  # go test
)


def _command_of(call: ToolCall) -> str | None:
    args: dict[str, Any] = call.arguments()
    value = args.get("command", args.get("cmd", args.get("argv")))
    if value is None and call.name not in _COMMAND_TOOLS:
        return None
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    if isinstance(value, str):
        return value
    return call.name if call.name in _COMMAND_TOOLS else None


def _exit_status(result: ToolResultMessage) -> int | None:
    text = result.result.content + "\n" + (result.result.reason or "")
    found = _EXIT.findall(text)
    return int(found[-1]) if found else None


def harvest_facts(messages: Iterable[Message]) -> Facts:
    """Facts of ``messages`` (a prefix of complete units, in order)."""
    calls: dict[str, ToolCall] = {}
    files: dict[tuple[str, str], FileFact] = {}
    commands: list[CommandFact] = []
    tests: dict[str, FailingTest] = {}
    constraints: list[Constraint] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            for tool_call in message.tool_calls:
                calls[tool_call.id] = tool_call
        elif isinstance(message, UserMessage):
            constraints.extend(extract_constraints(message))
        elif isinstance(message, ToolResultMessage):
            call = calls.get(message.call_id)
            content = message.result.content
            for pattern in _TESTS:
                for name in pattern.findall(content):
                    tests[name] = FailingTest(name=name, source_message_id=message.id)
            if call is None:
                continue
            action = _FILE_TOOLS.get(call.name)
            path = call.arguments().get("path")
            if action is not None and isinstance(path, str):
                if message.result.status.value != "succeeded":
                    continue
                hashes = _SHA.findall(content)
                key = (path, action)
                files.pop(key, None)  # re-insert: the dict keeps the order of last use
                files[key] = FileFact(
                    path=path,
                    action=action,
                    content_hash=("sha256:" + hashes[-1]) if hashes else None,
                    source_message_id=message.id,
                )
                continue
            command = _command_of(call)
            if command is not None:
                commands.append(
                    CommandFact(
                        command=command,
                        exit_status=_exit_status(message),
                        tool_status=message.result.status.value,
                        source_message_id=message.id,
                    )
                )
    return Facts(
        files=tuple(files.values()),
        commands=tuple(commands),
        failing_tests=tuple(tests.values()),
        constraints=tuple(constraints),
    )


def merge_facts(earlier: Facts, later: Facts) -> Facts:
    """Facts of two consecutive ranges: the later range's entry wins for the same file or
    test; commands and constraints are concatenated."""
    files = {(file.path, file.action): file for file in earlier.files}
    for file in later.files:
        files.pop((file.path, file.action), None)
        files[(file.path, file.action)] = file
    tests = {test.name: test for test in earlier.failing_tests}
    for test in later.failing_tests:
        tests[test.name] = test
    seen = {(c.text, c.source_message_id) for c in earlier.constraints}
    constraints = earlier.constraints + tuple(
        c for c in later.constraints if (c.text, c.source_message_id) not in seen
    )
    return Facts(
        files=tuple(files.values()),
        commands=earlier.commands + later.commands,
        failing_tests=tuple(tests.values()),
        constraints=constraints,
    )


def cap_facts(facts: Facts) -> Facts:
    """Only the newest facts of each kind (see :data:`MAX_FILES` and the others)."""
    return Facts(
        files=facts.files[-MAX_FILES:],
        commands=facts.commands[-MAX_COMMANDS:],
        failing_tests=facts.failing_tests[-MAX_FAILING_TESTS:],
        constraints=facts.constraints,
    )


# --- constraints ----------------------------------------------------------------------------

_SPLIT = re.compile(r"(?<=[。！？!?;；\n])|(?<=\.)\s+")
_MARKERS = re.compile(
    r"不要|不能|不许|不准|不得|禁止|别再|切勿|请勿|务必|必须|一定要|只能|只许|"
    r"\b(?:do not|don't|dont|never|must|must not|mustn't|always|shall not|may not|avoid|"
    r"under no circumstances)\b",
    re.IGNORECASE,
)


def extract_constraints(message: UserMessage) -> list[Constraint]:
    """Explicit requirements in a user message (``不要修改部署配置``, ``never push to main``),
    each sentence verbatim."""
    out: list[Constraint] = []
    seen: set[str] = set()
    for part in _SPLIT.split(message.text):
        sentence = part.strip()
        if sentence and sentence not in seen and _MARKERS.search(sentence):
            seen.add(sentence)
            out.append(Constraint(text=sentence, source_message_id=message.id))
    return out


def constraints_of(messages: Sequence[Message]) -> list[Constraint]:
    return [c for m in messages if isinstance(m, UserMessage) for c in extract_constraints(m)]
