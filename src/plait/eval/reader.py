"""The offline stand-in of ``plait eval compaction``: a deterministic reader.

It answers from what it is shown and nothing else, so with it the evaluation measures what
the context keeps, not how clever a model is:

- as the summarizer, it is the extractive stand-in (:func:`extractive_summary`);
- for an evidence question, it looks for the question's ``find`` pattern in the visible
  context, newest first, and answers with the match, citing the ids shown with it (a
  summary line's source ids, a recall result's message id). Like a real model it is not
  shown the ids of raw messages: when the match has no id, or nothing visible matches, it
  calls ``recall`` with the question's ``query`` once, then answers from what it has (no
  citation if it still has no id), or says it does not know;
- for a task, it finds the newest visible plan (``find``) and writes each path the plan
  names with ``write_file``, except a path a visible user constraint forbids (a sentence
  with a requirement marker that names the path); then it says it is done.

Its usage is reported at four characters per token, so its token counts follow the size
of the context it was sent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence

from plait.application.ports import ModelCapabilities, ModelRequest, ModelResponse, RawToolCall
from plait.domain.messages import (
    AssistantMessage,
    Message,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from plait.eval.extractive import extractive_summary
from plait.eval.trajectory import Question, Trajectory

__all__ = ["NAME", "ContextReader", "segments"]

NAME = "stand-in-reader"
_CONSTRAINT = re.compile(
    r"不要|不能|禁止|\b(?:do not|don't|never|must not|off limits|not be (?:edited|changed))\b",
    re.IGNORECASE,
)
_TRAILING_IDS = re.compile(r"\[([\w.:-]+(?:,\s*[\w.:-]+)*)\]\s*$")
_RECALL_HIT = re.compile(r"^- seq \d+ ([\w.:-]+): ")
_RAW_MESSAGE = re.compile(r'<message id="([^"]+)"[^>]*>(.*?)</message>', re.S)
_PREAMBLE_PREFIX = "ctx_"  # the id prefix of plait's preamble (constraints and summary)
_SENTENCE = re.compile(r"(?<=[.!?。！？;；])\s+|\n")
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]*)+")


def _text(message: Message) -> str:
    if isinstance(message, ToolResultMessage):
        return message.result.content
    if isinstance(message, AssistantMessage):
        return message.text + "".join(
            f"\n[{c.name} {c.arguments_json}]" for c in message.tool_calls
        )
    return message.text


def segments(items: Iterable[Message]) -> list[tuple[tuple[str, ...], str]]:
    """Everything visible as (ids it can be cited by, text), oldest first: a raw message
    by its own id; the lines of plait's preamble and of recall results by the ids they
    name (a line naming none cannot be cited)."""
    out: list[tuple[tuple[str, ...], str]] = []
    for message in items:
        derived = message.id.startswith(_PREAMBLE_PREFIX) or (
            isinstance(message, ToolResultMessage) and message.tool_name == "recall"
        )
        if not derived:  # a model is not shown the ids of raw messages
            out.append(((), _text(message)))
            continue
        text = _text(message)
        if text.startswith("<message "):  # recall of one message by its id
            out += [((f.group(1),), f.group(2)) for f in _RAW_MESSAGE.finditer(text)]
            continue
        lines: list[tuple[tuple[str, ...], str]] = []
        hits: list[tuple[tuple[str, ...], str]] = []
        for line in text.splitlines():
            if (hit := _RECALL_HIT.match(line)) is not None:
                hits.append(((hit.group(1),), line))  # recall lists these newest first
            elif (cite := _TRAILING_IDS.search(line)) is not None:
                lines.append((tuple(i.strip() for i in cite.group(1).split(",")), line))
            else:
                lines.append(((), line))
        out += lines + hits[::-1]
    return out


def _usage(request: ModelRequest, reply: str) -> Usage:
    ctx = request.context
    sent = len(ctx.instructions) + sum(len(_text(m)) for m in ctx.items)
    return Usage(input_tokens=math.ceil(sent / 4), output_tokens=math.ceil(len(reply) / 4))


class ContextReader:
    """The stand-in model (a :class:`~plait.application.ports.ModelClient`) for the
    questions of ``trajectories``; see the module docstring."""

    def __init__(self, trajectories: Sequence[Trajectory], *, context_window: int = 200_000):
        self._questions = {q.text: q for t in trajectories for q in t.questions}
        self._capabilities = ModelCapabilities(
            tool_calls=True,
            structured_output=True,
            parallel_tool_calls=True,
            context_window=context_window,
            max_output_tokens=4_000,
        )

    @property
    def name(self) -> str:
        return NAME

    @property
    def capabilities(self) -> ModelCapabilities:
        return self._capabilities

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.role == "summarizer":
            return extractive_summary(request)
        items = list(request.context.items)
        asked = max(
            (
                i
                for i, m in enumerate(items)
                if isinstance(m, UserMessage) and m.text in self._questions
            ),
            default=None,
        )
        if asked is None:
            return self._reply(request, "I do not know what is being asked.")
        question = self._questions[_text(items[asked])]
        since = items[asked + 1 :]
        if any(isinstance(m, ToolResultMessage) and m.tool_name == "write_file" for m in since):
            return self._reply(request, "Done.")
        recalled = any(isinstance(m, ToolResultMessage) and m.tool_name == "recall" for m in since)
        visible = segments(items)
        if question.kind == "task":
            return self._task(request, question, visible, recalled)
        return self._evidence(request, question, visible, recalled)

    def _reply(
        self, request: ModelRequest, text: str, calls: tuple[RawToolCall, ...] = ()
    ) -> ModelResponse:
        said = text + json.dumps([c.arguments for c in calls])
        return ModelResponse(text=text, tool_calls=calls, model=NAME, usage=_usage(request, said))

    def _recall(self, request: ModelRequest, question: Question) -> ModelResponse:
        call = RawToolCall(
            id=_call_id(request, 0), name="recall", arguments={"query": question.query}
        )
        return self._reply(request, "", (call,))

    def _evidence(
        self,
        request: ModelRequest,
        question: Question,
        visible: list[tuple[tuple[str, ...], str]],
        recalled: bool,
    ) -> ModelResponse:
        pattern = re.compile(question.find)
        uncited = None
        for ids, text in reversed(visible):
            found = pattern.search(text)
            if found is not None and ids:
                return self._reply(request, f"{found.group(1)} [{', '.join(ids)}]")
            uncited = uncited or found
        if not recalled:  # for the fact, or for the id of the message that holds it
            return self._recall(request, question)
        if uncited is not None:
            return self._reply(request, f"{uncited.group(1)} (I cannot tell which message)")
        return self._reply(request, "I cannot find it in this session.")

    def _task(
        self,
        request: ModelRequest,
        question: Question,
        visible: list[tuple[tuple[str, ...], str]],
        recalled: bool,
    ) -> ModelResponse:
        pattern = re.compile(question.find)
        plan = next(
            (match for _, text in reversed(visible) if (match := pattern.search(text)) is not None),
            None,
        )
        if plan is None:
            if not recalled:
                return self._recall(request, question)
            return self._reply(request, "I cannot tell what the next step is.")
        forbidden = [
            sentence
            for _, text in visible
            for sentence in _SENTENCE.split(text)
            if _CONSTRAINT.search(sentence)
        ]
        paths = [p.strip() for p in re.split(r",|\band\b", plan.group(1)) if p.strip()]
        allowed = [p for p in paths if not any(_forbids(rule, p) for rule in forbidden)]
        if not allowed:
            return self._reply(request, "Every step of the plan is forbidden; nothing to do.")
        calls = tuple(
            RawToolCall(
                id=_call_id(request, k),
                name="write_file",
                arguments={"path": p, "content": _edit_note(p)},
            )
            for k, p in enumerate(allowed)
        )
        return self._reply(request, "", calls)


def _forbids(rule: str, path: str) -> bool:
    """Whether a constraint sentence names ``path`` or a directory holding it."""
    for named in _PATH.findall(rule):
        if path == named or path.startswith(named.rstrip("/") + "/"):
            return True
    return False


def _call_id(request: ModelRequest, number: int) -> str:
    """Unique within the session: the calls of one reply differ by ``number``, replies by the
    newest message they saw."""
    return f"reader_{request.context.items[-1].id}_{number}"


def _edit_note(path: str) -> str:
    return f"# edited by the plan's next step: {path}\n"
