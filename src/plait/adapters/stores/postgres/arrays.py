"""One-dimensional arrays sent to PostgreSQL in binary, with their type known up front.

psycopg adapts a plain ``list`` by inspecting its elements on every query (each cursor
has its own adapter cache), which costs more than the rest of a commit's client side.
The commit and event writes wrap their columns in these classes instead, whose dumpers
write the binary array format directly (``array_send``: dimensions, then each element's
length and bytes; ``None`` is NULL).
"""

from __future__ import annotations

import struct
from typing import Any

from psycopg import adapters
from psycopg.adapt import Dumper
from psycopg.pq import Format

__all__ = ["Bytes", "Floats", "Ints", "Texts"]


class Texts(list[str | None]):
    """A ``text[]`` parameter."""


class Bytes(list[bytes | None]):
    """A ``bytea[]`` parameter."""


class Floats(list[float | None]):
    """A ``float8[]`` parameter."""


class Ints(list[int | None]):
    """An ``integer[]`` parameter (each value within 32 bits)."""


_HEAD = struct.Struct(">iiIii")
_EMPTY = struct.Struct(">iiI")
_LEN = struct.Struct(">i")
_NULL = _LEN.pack(-1)
_FLOAT = struct.Struct(">id")
_INT = struct.Struct(">ii")


def _array(elem_oid: int, items: list[Any], parts: list[bytes]) -> bytes:
    if not items:
        return _EMPTY.pack(0, 0, elem_oid)
    has_null = 1 if None in items else 0
    return _HEAD.pack(1, has_null, elem_oid, len(items), 1) + b"".join(parts)


def _bytes_parts(values: list[bytes | None]) -> list[bytes]:
    return [_NULL if v is None else _LEN.pack(len(v)) + v for v in values]


class _TextsDumper(Dumper):
    format = Format.BINARY
    oid = 1009  # text[]

    def dump(self, obj: Any) -> bytes:
        encoded = [None if v is None else v.encode() for v in obj]
        return _array(25, obj, _bytes_parts(encoded))


class _BytesDumper(Dumper):
    format = Format.BINARY
    oid = 1001  # bytea[]

    def dump(self, obj: Any) -> bytes:
        return _array(17, obj, _bytes_parts([None if v is None else bytes(v) for v in obj]))


class _FloatsDumper(Dumper):
    format = Format.BINARY
    oid = 1022  # float8[]

    def dump(self, obj: Any) -> bytes:
        return _array(701, obj, [_NULL if v is None else _FLOAT.pack(8, v) for v in obj])


class _IntsDumper(Dumper):
    format = Format.BINARY
    oid = 1007  # int4[]

    def dump(self, obj: Any) -> bytes:
        return _array(23, obj, [_NULL if v is None else _INT.pack(4, v) for v in obj])


for _cls, _dumper in (
    (Texts, _TextsDumper),
    (Bytes, _BytesDumper),
    (Floats, _FloatsDumper),
    (Ints, _IntsDumper),
):
    adapters.register_dumper(_cls, _dumper)
