"""Exact offline token counts for OpenAI's encodings (``o200k_base``, ``cl100k_base``)
with ``tiktoken``, OpenAI's own tokenizer. tiktoken downloads an encoding's rank file at
first use; plait ships both files as package data (``*.tiktoken`` beside this module,
byte-identical to OpenAI's: their SHA-256 is checked at load against the hash tiktoken
itself pins), so counting never touches the network. An encoding loads at the first
count and is shared by every meter of the process."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from importlib import resources

import tiktoken

from plait.domain.messages import AssistantMessage, Message, ToolResultMessage
from plait.domain.record import record
from plait.domain.tools import ToolSpec

__all__ = ["OpenAIMeter", "build_encoding", "encoding_for", "load_encoding", "parse_ranks"]

# OpenAI's chat framing (their cookbook's rule): 3 tokens per message, plus the reply primer
_PER_MESSAGE = 3
_PER_CALL = 3
_PER_TOOL = 8

_CL100K_PREFIXES = ("gpt-4-", "gpt-3.5")

_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"


@record
class _EncodingDef:
    """What tiktoken's ``tiktoken_ext.openai_public`` defines for an encoding, with the
    rank file's pinned hash."""

    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


_ENCODINGS = {
    "o200k_base": _EncodingDef(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": _EncodingDef(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=(
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"""
            r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        ),
        special_tokens={
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}


def parse_ranks(data: bytes) -> dict[bytes, int]:
    """A tiktoken rank file (one ``base64(token) rank`` pair a line) as a rank table."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def load_encoding(name: str) -> tiktoken.Encoding:
    """The named encoding, built from the rank file shipped with plait."""
    if name not in _ENCODINGS:
        raise ValueError(f"plait ships no tiktoken encoding named {name!r}")
    return build_encoding(
        name, resources.files(__package__).joinpath(f"{name}.tiktoken").read_bytes()
    )


def build_encoding(name: str, data: bytes) -> tiktoken.Encoding:
    """The encoding ``name`` from its rank file's bytes; bytes that do not match the pinned
    hash (a damaged install) raise ``RuntimeError`` instead of counting wrong."""
    definition = _ENCODINGS[name]
    if hashlib.sha256(data).hexdigest() != definition.sha256:
        raise RuntimeError(f"the {name}.tiktoken shipped with plait is damaged (hash mismatch)")
    return tiktoken.Encoding(
        name,
        pat_str=definition.pat_str,
        mergeable_ranks=parse_ranks(data),
        special_tokens=dict(definition.special_tokens),
    )


def encoding_for(model: str) -> str:
    """``cl100k_base`` for the GPT-4 and GPT-3.5 generation, ``o200k_base`` for every
    later model (GPT-4o, 4.1, 5, the o-series)."""
    name = model.lower()
    if name == "gpt-4" or name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


class OpenAIMeter:
    """A :class:`~plait.application.ports.TokenMeter` counting with the model's encoding."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        self._encoding_name = encoding
        self._encoding: tiktoken.Encoding | None = None

    @property
    def name(self) -> str:
        return f"openai/{self._encoding_name}"

    @property
    def fingerprint(self) -> str:
        """What stored counts are kept under (the encoding's ranks are pinned by hash;
        the version names the framing counted around each message). Estimating meters
        declare none: counting characters costs less than reading a stored count."""
        return f"openai/{self._encoding_name}/v1"

    @property
    def exact(self) -> bool:
        return True

    def _enc(self) -> tiktoken.Encoding:
        if self._encoding is None:
            self._encoding = load_encoding(self._encoding_name)
        return self._encoding

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return len(self._enc().encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        if isinstance(message, AssistantMessage):
            tokens = self.count_text(message.text) + self.count_text("assistant")
            for call in message.tool_calls:
                tokens += (
                    _PER_CALL + self.count_text(call.name) + self.count_text(call.arguments_json)
                )
        elif isinstance(message, ToolResultMessage):
            result = message.result
            tokens = self.count_text(result.content) + self.count_text(result.reason or "") + 2
        else:
            tokens = self.count_text(message.text) + 1
        return tokens + _PER_MESSAGE

    def count_tools(self, tools: tuple[ToolSpec, ...]) -> int:
        return sum(
            _PER_TOOL
            + self.count_text(t.name)
            + self.count_text(t.description)
            + self.count_text(json.dumps(dict(t.parameters), ensure_ascii=False, default=list))
            for t in tools
        )
