"""flat_encoder: the text json.dumps gives (compact, not ASCII-escaped), with its errors."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from plait.domain.jsontext import flat_encoder

VALUES: list[Any] = [
    "plain",
    'quote " backslash \\ newline \n tab \t é 日本 \x00',
    0,
    -12,
    2**70,
    1.5,
    1796159972.81479,
    None,
    True,
    [],
    {},
    [1, {"b": [None, "ü"], "a": 2.25}],
    {"z": 1, "a": {"y": [1, 2], "b": False}, "1": "one"},
    {1: "an int key", 2.5: "a float key", False: "bool"},
]


@pytest.mark.parametrize("value", VALUES)
def test_the_text_is_json_dumps_compact(value: Any) -> None:
    assert flat_encoder()(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert flat_encoder(sort_keys=True)(value) == json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True
    )


def test_out_of_range_floats_are_refused_unless_allowed() -> None:
    refuse = flat_encoder(allow_nan=False)
    for bad in (math.nan, {"a": [math.inf]}, -math.inf):
        with pytest.raises(ValueError, match="Out of range float"):
            refuse(bad)
    assert flat_encoder()([math.nan, math.inf]) == "[NaN,Infinity]"


def test_a_value_json_cannot_hold_is_a_type_error() -> None:
    encode = flat_encoder()
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        encode({"a": object()})
    with pytest.raises(TypeError, match="keys must be"):
        encode({(1, 2): "a tuple key"})
    assert encode({"after": "an error"}) == '{"after":"an error"}'  # nothing left behind
