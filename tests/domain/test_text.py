"""The one text rule (plait.domain.text): what is refused, and why, in words a model or a
client can act on."""

from __future__ import annotations

import pytest

from plait.domain.text import id_problem, printable, text_problem, value_problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("plain text\twith\nnewlines and é 😀", None),
        ("a\x00b", "contains a NUL character at offset 1"),
        (
            "ab\udcff",
            "contains a lone surrogate \\udcff at offset 2 (not a Unicode character; send "
            "valid text)",
        ),
        ("\ud800", "contains a lone surrogate \\ud800 at offset 0 (not a Unicode character; "
         "send valid text)"),
    ],
)  # fmt: skip
def test_text_refuses_nul_and_lone_surrogates_only(text: str, problem: str | None) -> None:
    assert text_problem(text) == problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("call_01-abc.X", None),
        ("", "is empty"),
        ("x" * 200, None),
        ("x" * 201, "is 201 characters long (at most 200)"),
        ("a\tb", "contains a control character \\x09 at offset 1"),
        ("a\x85", "contains a control character \\x85 at offset 1"),
        ("\x00", "contains a NUL character at offset 0"),
    ],
)
def test_ids_also_refuse_control_characters_and_length(value: str, problem: str | None) -> None:
    assert id_problem(value) == problem


def test_value_problem_names_the_json_path_of_the_first_bad_string() -> None:
    assert value_problem({"a": [1, {"b": "ok"}, "x\x00"]}) == (
        "$.a[2] contains a NUL character at offset 1"
    )
    assert value_problem({"k\udcff": 1}) == (
        "key '\\udcff' of $ contains a lone surrogate \\udcff at offset 1 (not a Unicode "
        "character; send valid text)"
    ).replace("'\\udcff'", ascii("k\udcff"))
    assert value_problem({"a": ["fine", 2, None, True]}) is None


def test_printable_escapes_what_no_store_can_keep() -> None:
    shown = printable("a\x00b\udcffc")
    assert shown == "a\\x00b\\udcffc"
    shown.encode("utf-8")
    assert printable("x" * 30, 10) == "xxxxxxxxxx... [20 more characters]"


def test_long_text_is_judged_by_every_character_whatever_its_script() -> None:
    wide = "模型的回答，很长。" * 2000
    assert text_problem(wide) is None and text_problem("ascii " * 5000) is None
    assert text_problem(wide + "\udcff") == (
        f"contains a lone surrogate \\udcff at offset {len(wide)} (not a Unicode "
        "character; send valid text)"
    )
    assert text_problem("é" + "x" * 5000 + "\x00") == "contains a NUL character at offset 5001"
    assert text_problem("\x00" + wide) == "contains a NUL character at offset 0"
    assert printable(wide) is wide
    assert printable("é\udcff") == "é\\udcff"
