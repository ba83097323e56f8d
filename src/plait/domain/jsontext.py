"""Compact JSON text of values plait builds itself, without the per-call set-up of
``json.dumps`` / ``JSONEncoder.encode`` (a Python frame or two and a new C encoder per
call: a third of the cost of encoding a small dict).

Only for values that cannot hold a reference cycle (made of scalars, or decoded from JSON
text): the encoder is built once and keeps no cycle check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["flat_encoder"]

_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)


def _refuse(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def flat_encoder(*, sort_keys: bool = False, allow_nan: bool = True) -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), ...)`` for acyclic
    values: the same text, the same errors (a value JSON cannot hold: TypeError; NaN or
    infinity with ``allow_nan=False``: ValueError)."""
    if _C_MAKE_ENCODER is None:  # no C accelerator: the standard encoder
        return json.JSONEncoder(
            ensure_ascii=False,
            separators=(",", ":"),
            sort_keys=sort_keys,
            allow_nan=allow_nan,
            check_circular=False,
        ).encode
    chunks = _C_MAKE_ENCODER(
        None,  # no markers: no cycle check
        _refuse,
        json.encoder.encode_basestring,
        None,  # no indent
        ":",
        ",",
        sort_keys,
        False,  # skipkeys
        allow_nan,
    )
    join = "".join

    def encode(value: Any) -> str:
        return join(chunks(value, 0))

    return encode
