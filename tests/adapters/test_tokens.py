"""Token meters: exact offline for OpenAI's encodings, calibrated estimates elsewhere."""

from __future__ import annotations

import importlib
import json
from importlib import resources
from pathlib import Path

import pytest

from plait.adapters.tokens import EstimatingMeter, OpenAIMeter, encoding_for, meter_for, open_meter
from plait.adapters.tokens._openai import build_encoding, load_encoding, parse_ranks
from plait.config import Config, ModelEntry
from plait.domain.errors import TokenMeterModelUnconfiguredError
from plait.domain.messages import AssistantMessage, ToolCall, UserMessage
from plait.testing.fake_providers import FakeProvider
from tests.adapters._cassettes import tool
from tests.adapters._clients import client_for


@pytest.mark.slow
def test_openai_encodings_count_exactly_offline() -> None:
    o200k, cl100k = OpenAIMeter("o200k_base"), OpenAIMeter("cl100k_base")
    # token ids as tiktoken gives them: o200k "hello world" = [24912, 2375]
    assert o200k.count_text("hello world") == 2
    assert cl100k.count_text("hello world") == 2
    assert o200k.count_text("") == 0
    assert o200k.count_text("<|endoftext|>") > 1  # special tokens count as plain text
    assert o200k.exact and o200k.name == "openai/o200k_base"
    assert encoding_for("gpt-4o") == encoding_for("gpt-5-mini") == "o200k_base"
    assert encoding_for("gpt-4-turbo") == encoding_for("gpt-3.5-turbo") == "cl100k_base"


def test_message_and_tool_counts_include_their_parts() -> None:
    m = OpenAIMeter()
    user = UserMessage(id="u", text="hello world", created_at=0.0)
    call = ToolCall.create(id="c1", name="read_file", arguments={"path": "a.txt"})
    assistant = AssistantMessage(id="a", text="", created_at=0.0, tool_calls=(call,))
    assert m.count_message(user) == 2 + 1 + 3
    assert m.count_message(assistant) > m.count_text(call.arguments_json)
    read = tool("read_file", {"type": "object", "properties": {"path": {"type": "string"}}})
    assert m.count_tools((read,)) > m.count_tools(())


def test_estimate_is_conservative() -> None:
    e = EstimatingMeter("anthropic:claude-haiku-4-5")
    assert not e.exact
    text = "x" * 400
    assert e.count_text(text) == 120  # 100 raw tokens x 1.2 safety (calibration: compaction)
    assert EstimatingMeter("x").count_text("你好") == 3  # non-ASCII: a token per character


def test_meters_per_model_and_unknown_models() -> None:
    assert isinstance(open_meter("openai:gpt-4o", Config()), OpenAIMeter)
    assert isinstance(open_meter("anthropic:claude-haiku-4-5", Config()), EstimatingMeter)
    with pytest.raises(TokenMeterModelUnconfiguredError) as info:
        open_meter("openai-compatible:http://127.0.0.1:9/v1#mystery", Config())
    assert info.value.code == "token_meter_model_unconfigured"
    assert "TOKEN_METER_MODEL_UNCONFIGURED" in info.value.message
    assert "context_window" in info.value.message
    spec = "openai-compatible:http://127.0.0.1:9/v1#qwen"
    declared = Config(
        models={spec: ModelEntry(name=spec, source="t", settings={"context_window": 32768})}
    )
    assert isinstance(open_meter(spec, declared), EstimatingMeter)


@pytest.mark.slow
def test_meter_for_a_client() -> None:
    with FakeProvider("openai", []) as fake:
        assert isinstance(meter_for(client_for("openai", fake.base_url), Config()), OpenAIMeter)
        assert isinstance(
            meter_for(client_for("anthropic", fake.base_url), Config()), EstimatingMeter
        )


_CORPUS = Path(__file__).parent / "fixtures" / "tokens" / "corpus.json"


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_tiktoken_counts_equal_the_previous_meters_on_a_corpus(encoding: str) -> None:
    # the corpus's counts were recorded with quicktok-v1 0.4.0, the meter before tiktoken
    corpus = json.loads(_CORPUS.read_text(encoding="utf-8"))
    meter = OpenAIMeter(encoding)
    counts = [meter.count_text(text) for text in corpus["texts"]]
    assert len(counts) == 211
    assert counts == corpus["counts"][encoding]


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_shipped_encodings_are_tiktokens_own(
    encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tiktoken's own definition, its rank file read from plait's package data instead of
    # being downloaded: same ranks (hash pinned by tiktoken), pattern and special tokens
    import tiktoken.load

    public = importlib.import_module("tiktoken_ext.openai_public")

    shipped = resources.files("plait.adapters.tokens").joinpath(f"{encoding}.tiktoken")
    asked: list[tuple[str, str | None]] = []

    def from_package(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        asked.append((url, expected_hash))
        data = shipped.read_bytes()
        assert expected_hash is not None
        assert tiktoken.load.check_hash(data, expected_hash)
        return parse_ranks(data)

    monkeypatch.setattr(public, "load_tiktoken_bpe", from_package)
    theirs = getattr(public, encoding)()
    ours = load_encoding(encoding)
    assert asked and asked[0][0].endswith(f"/{encoding}.tiktoken")
    assert ours.name == theirs["name"] == encoding
    assert ours._pat_str == theirs["pat_str"]
    assert ours._special_tokens == theirs["special_tokens"]
    assert ours._mergeable_ranks == theirs["mergeable_ranks"]
    assert ours.n_vocab == {"o200k_base": 200019, "cl100k_base": 100277}[encoding]


@pytest.mark.slow
def test_a_damaged_or_missing_encoding_is_refused() -> None:
    with pytest.raises(ValueError, match="no tiktoken encoding named 'p50k_base'"):
        load_encoding("p50k_base")
    data = resources.files("plait.adapters.tokens").joinpath("cl100k_base.tiktoken").read_bytes()
    damaged = data.replace(b" 100255\n", b" 100254\n")
    with pytest.raises(RuntimeError, match=r"cl100k_base.tiktoken shipped with plait is damaged"):
        build_encoding("cl100k_base", damaged)
    assert build_encoding("cl100k_base", data).encode("hello world") == [15339, 1917]
    with pytest.raises(ValueError, match="not enough values"):
        parse_ranks(b"not-base64-and-no-rank\n")
