"""Loading script files: YAML and JSON, and every validation message."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from plait.application.ports import ModelCapabilities
from plait.domain.errors import ModelError, ScriptError
from plait.domain.messages import Usage
from plait.domain.tools import ToolSpec
from plait.testing import (
    Script,
    ScriptedCall,
    ScriptedError,
    ScriptedModel,
    Turn,
    load_script,
    parse_script,
)
from plait.testing._script import DEFAULT_CAPABILITIES

from ._builders import READ_FILE, ask, context, history, write

DEMO_YAML = """\
version: 1
model: scripted-demo
capabilities: {context_window: 200000}
assistant:
  - text: "Let me read the config."
    tool_calls:
      - name: read_file
        arguments: {path: pyproject.toml}
        id: call_cfg
  - text: "Done."
    usage: {input_tokens: 1200, output_tokens: 40}
  - error: context_window_exceeded
  - error: {code: RATE_LIMITED, message: "slow down", status: 429}
  - malformed: unknown_tool
  - text: ""
    tool_calls:
      - {name: read_file, raw_arguments: '{"path": ', id: null}
reviewer:
  - structured: {decision: allow, reason: "read only"}
summarizer:
  - structured: {goal: "ship it", constraints: []}
    text: "summary"
"""

DEMO = Script(
    source="<set per test>",
    model="scripted-demo",
    capabilities=ModelCapabilities(
        structured_output=True, context_window=200_000, max_output_tokens=8_192
    ),
    assistant=(
        Turn(
            text="Let me read the config.",
            tool_calls=(
                ScriptedCall(
                    name="read_file",
                    arguments={"path": "pyproject.toml"},
                    id="call_cfg",
                    auto_id=False,
                ),
            ),
        ),
        Turn(text="Done.", input_tokens=1200, output_tokens=40),
        Turn(error=ScriptedError(code="CONTEXT_WINDOW_EXCEEDED"), rejected=True),
        Turn(
            error=ScriptedError(code="RATE_LIMITED", message="slow down", status=429),
            rejected=True,
        ),
        Turn(malformed="unknown_tool", rejected=True),
        Turn(
            text="",
            tool_calls=(
                ScriptedCall(name="read_file", raw_arguments='{"path": ', id=None, auto_id=False),
            ),
            rejected=True,
        ),
    ),
    reviewer=(Turn(structured={"decision": "allow", "reason": "read only"}, has_structured=True),),
    summarizer=(
        Turn(
            text="summary", structured={"goal": "ship it", "constraints": []}, has_structured=True
        ),
    ),
)


def with_source(script: Script, source: str) -> Script:
    return Script(
        source=source,
        model=script.model,
        capabilities=script.capabilities,
        assistant=script.assistant,
        reviewer=script.reviewer,
        summarizer=script.summarizer,
    )


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_loads_a_yaml_script(tmp_path: Path, suffix: str) -> None:
    path = write(tmp_path, f"demo{suffix}", DEMO_YAML)

    assert load_script(path) == with_source(DEMO, str(path))


def test_loads_the_same_script_from_json(tmp_path: Path) -> None:
    import yaml

    path = write(tmp_path, "demo.json", json.dumps(yaml.safe_load(DEMO_YAML), indent=2))

    assert load_script(path) == with_source(DEMO, str(path))


def test_defaults_of_a_minimal_script() -> None:
    script = parse_script({"version": 1})

    assert script == Script(source="<script>", capabilities=DEFAULT_CAPABILITIES)


def test_the_complete_example_in_the_docs_plays_as_described(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "scripted-model.md").read_text(encoding="utf-8")
    example = doc.split("<!-- complete example -->", 1)[1].split("```yaml\n", 1)[1]
    model = ScriptedModel.from_file(write(tmp_path, "fix-typo.yaml", example.split("```")[0]))
    edit = ToolSpec(name="edit_file", description="Edit.", parameters={"type": "object"})
    tools = (READ_FILE, edit)

    step0 = ask(model, context(history(0), tools=tools))
    rejected = ask(model, context(history(1), tools=tools))
    step1 = ask(model, context(history(1), tools=tools, corrections=1))
    with pytest.raises(ModelError) as error:
        ask(model, context(history(2), tools=tools))
    step2 = ask(model, context(history(2), tools=tools))
    review = ask(model, role="reviewer")
    summary = ask(model, role="summarizer")

    assert [c.id for c in step0.tool_calls] == ["call_readme"]
    assert step0.usage == Usage(input_tokens=1200, output_tokens=40)
    assert rejected.tool_calls[0].arguments == '{"__truncated__": "'
    assert [(c.id, c.name) for c in step1.tool_calls] == [("call_3_1", "edit_file")]
    assert (error.value.model_code, error.value.details["status"]) == ("TRANSIENT", 529)
    assert step2.text == "Fixed the typo in README.md."
    assert review.structured["decision"] == "allow"
    assert summary.structured["goal"] == "Fix the typo in README.md"
    model.assert_complete()


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "version: 1\nassistant:\n  - text: 'a\n  - b: [\n")

    with pytest.raises(ScriptError) as info:
        load_script(path)

    assert info.value.message.startswith(f"invalid YAML in {path} at line 5, column 1: ")
    assert info.value.details == {"file": str(path), "line": 5, "column": 1}


def test_json_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.json", '{"version": 1,\n  "assistant": [}\n')

    with pytest.raises(ScriptError) as info:
        load_script(path)

    assert info.value.message == (f"invalid JSON in {path} at line 2, column 17: Expecting value")


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"

    with pytest.raises(ScriptError, match=r"script file not found: .*nope\.yaml"):
        load_script(path)


def test_unknown_extension_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "demo.txt", "version: 1\n")

    with pytest.raises(ScriptError, match=r"must end in \.json, \.yaml or \.yml, not \.txt"):
        load_script(path)


CODES = "authentication, context_window_exceeded, invalid_request, rate_limited, transient"
KINDS = "bad_json, unknown_tool, schema_mismatch, duplicate_ids, missing_id"

INVALID = [
    (
        "assistant:\n  - text: hi\n  - text: x\n    tool_cals: []\n",
        "unknown key 'tool_cals' in assistant turn 2 of {file}; did you mean 'tool_calls'?",
    ),
    ("asistant: []\n", "unknown key 'asistant' in {file}; did you mean 'assistant'?"),
    (
        "assistant:\n  - {text: hi, colour: red}\n",
        "unknown key 'colour' in assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - tool_calls: [{name: a, argument: {}}]\n",
        "unknown key 'argument' in tool call 1 of assistant turn 1 of {file};"
        " did you mean 'arguments'?",
    ),
    (
        "assistant:\n  - usage: {input_tokens: 3}\n",
        "assistant turn 1 of {file} has none of the turn forms:"
        " text, tool_calls, structured, error, malformed",
    ),
    ("assistant:\n  - text: 5\n", "'text' in assistant turn 1 of {file} must be a string, got int"),
    ("assistant:\n  - hello\n", "assistant turn 1 of {file} must be a mapping, got str"),
    ("assistant: {text: hi}\n", "'assistant' in {file} must be a list, got dict"),
    ("reviewer:\n", "'reviewer' in {file} must be a list, got null"),
    (
        "assistant:\n  - text: a\n  - text: b\n  - error: rate_limit\n",
        "unknown error code 'rate_limit' in assistant turn 3 of {file};"
        f" did you mean 'rate_limited'? (codes: {CODES})",
    ),
    (
        "assistant:\n  - error: {code: transient, mesage: x}\n",
        "unknown key 'mesage' in the error of assistant turn 1 of {file}; did you mean 'message'?",
    ),
    (
        "assistant:\n  - error: {message: x}\n",
        "missing required key 'code' in the error of assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - error: {code: transient, status: '503'}\n",
        "'status' in the error of assistant turn 1 of {file} must be an integer, got str",
    ),
    (
        "assistant:\n  - {error: transient, text: x}\n",
        "'error' cannot be combined with 'text' in assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - malformed: bad_jsn\n",
        "unknown malformed kind 'bad_jsn' in assistant turn 1 of {file};"
        f" did you mean 'bad_json'? (kinds: {KINDS})",
    ),
    (
        "reviewer:\n  - tool_calls: []\n",
        "'tool_calls' is only allowed in assistant turns (reviewer turn 1 of {file})",
    ),
    (
        "assistant:\n  - {tool_calls: [], structured: {}}\n",
        "'tool_calls' cannot be combined with 'structured' in assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - {malformed: missing_id, tool_calls: []}\n",
        "'malformed' cannot be combined with 'tool_calls' in assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - tool_calls: [{arguments: {}}]\n",
        "missing required key 'name' in tool call 1 of assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - tool_calls: [{name: a, id: 5}]\n",
        "'id' in tool call 1 of assistant turn 1 of {file} must be a string, got int",
    ),
    (
        "assistant:\n  - tool_calls: [{name: a, arguments: [1]}]\n",
        "'arguments' in tool call 1 of assistant turn 1 of {file} must be a mapping, got list",
    ),
    (
        "assistant:\n  - tool_calls: [{name: a, arguments: {}, raw_arguments: '{}'}]\n",
        "'arguments' cannot be combined with 'raw_arguments' in tool call 1 of"
        " assistant turn 1 of {file}",
    ),
    (
        "assistant:\n  - tool_calls: [b]\n",
        "tool call 1 of assistant turn 1 of {file} must be a mapping, got str",
    ),
    (
        "reviewer:\n  - structured: {when: 2024-01-01}\n",
        "'structured' in reviewer turn 1 of {file} is not a JSON value:"
        " datetime.date(2024, 1, 1) (date)",
    ),
    (
        "assistant:\n  - {text: a, usage: {input: 3}}\n",
        "unknown key 'input' in the usage of assistant turn 1 of {file};"
        " did you mean 'input_tokens'?",
    ),
    (
        "assistant:\n  - {text: a, usage: {input_tokens: -1}}\n",
        "'input_tokens' in the usage of assistant turn 1 of {file} must not be negative, got -1",
    ),
    (
        "assistant:\n  - {text: a, rejected: 'yes'}\n",
        "'rejected' in assistant turn 1 of {file} must be a boolean, got str",
    ),
    ("model: 7\n", "'model' in {file} must be a string, got int"),
    (
        "capabilities: {context_windw: 5}\n",
        "unknown key 'context_windw' in 'capabilities' of {file}; did you mean 'context_window'?",
    ),
    (
        "capabilities: {streaming: 'no'}\n",
        "'streaming' in 'capabilities' of {file} must be a boolean, got str",
    ),
    (
        "capabilities: {context_window: 0}\n",
        "'context_window' in 'capabilities' of {file} must be a positive integer or null, got 0",
    ),
    (
        "capabilities: {price_input_per_mtok: -1}\n",
        "'price_input_per_mtok' in 'capabilities' of {file} must be a number of dollars (0 or "
        "more) or null, got -1",
    ),
    (
        "capabilities: {price_output_per_mtok: 'cheap'}\n",
        "'price_output_per_mtok' in 'capabilities' of {file} must be a number of dollars (0 or "
        "more) or null, got 'cheap'",
    ),
]


def test_a_script_can_declare_prices() -> None:
    script = parse_script(
        {
            "version": 1,
            "capabilities": {"price_input_per_mtok": 3, "price_output_per_mtok": 15.5},
        }
    )
    caps = script.capabilities
    assert (caps.price_input_per_mtok, caps.price_output_per_mtok) == (3, 15.5)
    assert caps.price_cached_input_per_mtok is None
    assert parse_script({"version": 1}).capabilities.price_input_per_mtok is None


@pytest.mark.parametrize(("body", "expected"), INVALID)
def test_invalid_scripts_are_refused_with_a_precise_message(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = write(tmp_path, "demo.yaml", "version: 1\n" + body)

    with pytest.raises(ScriptError) as info:
        load_script(path)

    assert info.value.message == expected.format(file=path)


def test_error_details_name_file_role_turn_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "demo.yaml",
        "version: 1\nassistant:\n  - text: hi\n  - text: x\n    tool_cals: []\n",
    )

    with pytest.raises(ScriptError) as info:
        load_script(path)

    assert info.value.details == {
        "file": str(path),
        "role": "assistant",
        "turn": 2,
        "key": "tool_cals",
    }
    copy = pickle.loads(pickle.dumps(info.value))
    assert (type(copy), copy.message, copy.details) == (
        ScriptError,
        info.value.message,
        info.value.details,
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, "script <script> must be a mapping with a 'version' key, got null"),
        (["a"], "script <script> must be a mapping with a 'version' key, got list"),
        ({"assistant": []}, "missing required key 'version' in <script>"),
        ({"version": 2}, "unsupported script version 2 in <script> (supported: 1)"),
        ({"version": True}, "unsupported script version True in <script> (supported: 1)"),
    ],
)
def test_top_level_shape(data: object, expected: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(data)

    assert info.value.message == expected


def test_error_codes_are_case_insensitive() -> None:
    script = parse_script(
        {"version": 1, "assistant": [{"error": "Rate_Limited"}, {"error": {"code": "transient"}}]}
    )

    assert [t.error for t in script.assistant] == [
        ScriptedError(code="RATE_LIMITED"),
        ScriptedError(code="TRANSIENT"),
    ]


@pytest.mark.parametrize(
    ("turn", "rejected"),
    [
        ({"text": "fine"}, False),
        ({"tool_calls": [{"name": "a", "raw_arguments": '{"ok": 1}'}]}, False),
        ({"tool_calls": [{"name": "a", "raw_arguments": "{broken"}]}, True),
        ({"tool_calls": [{"name": "a", "raw_arguments": "[1]"}]}, True),
        ({"tool_calls": [{"name": "a", "id": None}]}, True),
        ({"tool_calls": [{"name": "a", "id": "x"}, {"name": "b", "id": "x"}]}, True),
        ({"malformed": "schema_mismatch"}, True),
        ({"error": "transient"}, True),
        ({"tool_calls": [{"name": "not_a_tool"}], "rejected": True}, True),
        ({"tool_calls": [{"name": "a", "id": None}], "rejected": False}, False),
    ],
)
def test_which_turns_count_as_rejected(turn: dict[str, object], rejected: bool) -> None:
    script = parse_script({"version": 1, "assistant": [turn]})

    assert script.assistant[0].rejected is rejected


@pytest.mark.slow
def test_yaml_is_imported_only_for_yaml_scripts(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = write(tmp_path, "s.json", '{"version": 1, "assistant": [{"text": "hi"}]}')
    code = (
        "import sys; from plait.testing import load_script; "
        f"load_script({str(path)!r}); print('yaml' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout

    assert out.strip() == "False"
