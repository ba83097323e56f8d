"""Frozen records whose ``__init__`` sets their slots directly.

``@dataclass(frozen=True, slots=True)`` makes an ``__init__`` that sets each field with
``object.__setattr__(self, name, value)``: a lookup of the type's ``__setattr__``, a call
through its wrapper and a lookup of the name on the type again, for every field of every
record made. A step of a run makes about twenty such records (its messages, the tool call,
its execution record, the model's request and response, the commit and its result), and
setting their fields was ~7% of the instructions of a W1 step (docs/benchmarks.md).
``record`` is that dataclass with an ``__init__`` that sets the slots directly: the same
signature, defaults, ``default_factory``, ``init=False`` fields and ``__post_init__``,
the same object. A record of five fields or more is filled in as an instance of its
:func:`twin` (a plain class of the same layout) by plain attribute stores, then given its
own class back (350 against 458 ns for eight fields here, 405 against 667 for twelve);
a smaller one, or one with a base of its own, calls each slot's descriptor (about 60% of
``object.__setattr__``'s time). An instance of a subclass of a record (whose layout may
differ) is filled in through the descriptors.

The dataclass is made with ``init=False`` and the ``__init__`` is made here instead of by
``dataclasses`` (one function generated per class either way; its code compiled once and
then read from :mod:`plait._compiled`'s cache by later processes). Type checkers see a frozen
dataclass (``dataclass_transform``). ``InitVar`` fields are not supported: a class with
one keeps using ``@dataclass``.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, TypeVar, dataclass_transform, overload

from plait._compiled import compiled

__all__ = ["maker", "record", "twin"]

T = TypeVar("T")

_MISSING = dataclasses.MISSING


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (as dataclasses'
    own sentinel): the factory is called when the caller gave nothing."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(*, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[T] | None = None, /, *, kw_only: bool = False) -> Any:
    """``@dataclass(frozen=True, slots=True, kw_only=kw_only)`` with a faster
    ``__init__``, and its other methods made without compiling them (see
    :func:`_methods`)."""

    def make(target: type[T]) -> type[T]:
        documented = bool(target.__doc__)
        if not documented:  # written below; dataclasses would read object.__init__'s
            target.__doc__ = "-"  # signature from its text (~2 ms: tokenize's regex)
        # dataclasses compiles nothing for these options: the fields, the slots and
        # __match_args__ only; the methods are set below (see _methods)
        frozen_base = any(
            getattr(getattr(base, "__dataclass_params__", None), "frozen", False)
            for base in target.__mro__[1:]
        )
        made: type[T] | None = None if frozen_base else _plain_dataclass(target, kw_only)
        if made is None:
            made = dataclasses.dataclass(
                target,
                slots=True,
                kw_only=kw_only,
                init=False,
                repr=False,
                eq=False,
                frozen=frozen_base,  # dataclasses' own check: frozen bases, frozen subclasses
            )
        _methods(made, frozen_by_dataclasses=frozen_base)
        if "__init__" not in made.__dict__:
            made.__init__ = _slot_init(made)  # type: ignore[method-assign]
        if not documented:  # as dataclasses does, from the signature (it saw none)
            signature = str(inspect.signature(made)).replace(" -> None", "")
            made.__doc__ = made.__name__ + signature
        return made

    return make if cls is None else make(cls)


_PARAMS = dataclasses.dataclass(
    type("_Params", (), {"__doc__": "-"}), slots=True, init=False, repr=False, eq=False
).__dataclass_params__  # type: ignore[attr-defined]
"""What ``dataclasses`` records of a class made with :func:`_plain_dataclass`'s options."""
_FIELD = getattr(dataclasses, "_FIELD", None)


def _plain_dataclass(cls: type[T], kw_only: bool) -> type[T] | None:
    """What ``dataclasses.dataclass(cls, slots=True, kw_only=kw_only, init=False,
    repr=False, eq=False)`` makes of a plain class (no base but ``object``, no metaclass,
    no ``__slots__`` of its own, every annotation a string that names no ``ClassVar``,
    ``InitVar`` or ``KW_ONLY``): its fields, ``__match_args__``, and the class made again
    with a slot per field. None for any other class, and for one dataclasses refuses (a
    mutable default, a ``field()`` without an annotation), or whose methods refer to their
    class (``super()``, which newer Pythons' dataclasses point at the slotted class):
    dataclasses then makes it, or says why not. Made here, it costs about half of
    dataclasses' time (which checks each annotation against three special forms with a
    regular expression and reads the class's module for each): a CLI command defines about
    a hundred records."""
    own = cls.__dict__
    if cls.__bases__ != (object,) or type(cls) is not type or "__slots__" in own:
        return None  # (slots of its own: dataclasses' TypeError)
    if _FIELD is None:  # pragma: no cover - a dataclasses without it
        return None
    hints: dict[str, Any] = own.get("__annotations__", {})
    special = ("ClassVar", "InitVar", "KW_ONLY")
    if not all(isinstance(h, str) and not any(s in h for s in special) for h in hints.values()):
        return None
    for name, value in own.items():
        if isinstance(value, dataclasses.Field) and name not in hints:
            return None  # dataclasses' TypeError
        if _refers_to_its_class(value):
            return None
    fields: dict[str, dataclasses.Field[Any]] = {}
    for name, hint in hints.items():
        default = getattr(cls, name, _MISSING)
        spec: Any = default if isinstance(default, dataclasses.Field) else None
        if spec is None:
            spec = dataclasses.field(default=default)
        if spec.default.__class__.__hash__ is None:
            return None  # a mutable default: dataclasses' ValueError
        spec.name = name
        spec.type = hint
        spec._field_type = _FIELD
        if spec.kw_only is _MISSING:
            spec.kw_only = kw_only
        fields[name] = spec
    namespace = dict(own)
    for name in fields:
        namespace.pop(name, None)  # a default is its field's, not the class's
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    namespace["__slots__"] = tuple(fields)
    namespace["__dataclass_fields__"] = fields
    params = copy.copy(_PARAMS)
    if hasattr(params, "kw_only"):  # Python 3.12 on
        params.kw_only = kw_only
    namespace["__dataclass_params__"] = params
    if "__match_args__" not in own:
        namespace["__match_args__"] = tuple(
            name for name, spec in fields.items() if spec.init and not spec.kw_only
        )
    made: type[T] = type(cls.__name__, cls.__bases__, namespace)
    made.__qualname__ = cls.__qualname__
    return made


def _refers_to_its_class(member: Any) -> bool:
    """Whether a member of a class body is a function (or a property, class or static
    method of one) that uses ``__class__``: zero-argument ``super()`` does."""
    if isinstance(member, property):
        return any(_refers_to_its_class(f) for f in (member.fget, member.fset, member.fdel))
    if isinstance(member, classmethod | staticmethod):
        member = member.__func__
    code = getattr(member, "__code__", None)
    return code is not None and "__class__" in code.co_freevars


def _methods(cls: type[Any], *, frozen_by_dataclasses: bool) -> None:
    """Give ``cls`` what ``@dataclass(frozen=True, slots=True)`` would, but ``__init__``
    (made by :func:`_slot_init`), without compiling anything. ``dataclasses`` compiles six
    functions per class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
    ``__setattr__``, ``__delattr__``): ~0.15 ms a class on a quick host, 0.5-1 ms on a slow
    one, and a command of the CLI defines about a hundred records. Here the five others are
    closures over the fields (``__init__`` is still generated when the class is made: made
    lazily, at a class's first use, it moved that cost into a process's first run, ~3 ms
    in W1's; its code comes from :mod:`plait._compiled`'s cache once a process has compiled
    it). The class's own methods, where it defines them, are kept, as dataclasses
    keeps them."""
    fields = dataclasses.fields(cls)
    own = cls.__dict__
    params = cls.__dataclass_params__
    params.init = params.repr = params.eq = params.frozen = True  # what the class is
    if "__repr__" not in own:
        type.__setattr__(cls, "__repr__", _repr(tuple(f.name for f in fields if f.repr)))
    compared = _key(tuple(f.name for f in fields if f.compare))
    if "__eq__" not in own:
        type.__setattr__(cls, "__eq__", _eq(compared))
    explicit_hash = own.get("__hash__", _MISSING)
    if explicit_hash is _MISSING or (explicit_hash is None and "__eq__" in own):
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        type.__setattr__(cls, "__hash__", _hash(_key(hashed)))
    if not frozen_by_dataclasses:  # else dataclasses made them: a frozen dataclass's subclass
        if "__setattr__" in own or "__delattr__" in own:  # as dataclasses refuses it
            raise TypeError(f"Cannot overwrite attribute __setattr__ in class {cls.__name__}")
        names = frozenset(f.name for f in fields)
        setter, deleter = _frozen(cls, names)
        type.__setattr__(cls, "__setattr__", setter)
        type.__setattr__(cls, "__delattr__", deleter)
    if "__getstate__" not in own:
        type.__setattr__(cls, "__getstate__", _getstate(tuple(f.name for f in fields)))
    if "__setstate__" not in own:
        type.__setattr__(cls, "__setstate__", _setstate(tuple(f.name for f in fields)))


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of the fields ``names`` of an object (what dataclasses compares)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return attrgetter(*names)


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _eq(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))

    return __hash__


def _frozen(
    cls: type[Any], names: frozenset[str]
) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _getstate(names: tuple[str, ...]) -> Callable[[Any], list[Any]]:
    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, name) for name in names]

    return __getstate__


def _setstate(names: tuple[str, ...]) -> Callable[[Any, list[Any]], None]:
    def __setstate__(self: Any, state: list[Any]) -> None:
        for name, value in zip(names, state, strict=False):
            object.__setattr__(self, name, value)

    return __setstate__


def _slot_init(cls: type[Any]) -> Callable[..., None]:
    """The ``__init__`` dataclasses would make for ``cls``, setting each field through
    its slot's descriptor instead of ``object.__setattr__``."""
    pseudo = [
        spec.name
        for spec in cls.__dataclass_fields__.values()
        if getattr(spec, "_field_type", None) is getattr(dataclasses, "_FIELD_INITVAR", None)
    ]
    if pseudo:
        raise TypeError(f"record {cls.__qualname__}: InitVar fields are not supported ({pseudo})")
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    stores: list[tuple[str, str]] = []  # (field, the expression of its value)
    defaulted = ""  # the last positional parameter with a default, if any
    for spec in dataclasses.fields(cls):
        name = spec.name
        names[f"_set_{name}"] = _slot(cls, name).__set__
        if spec.default is not _MISSING:
            names[f"_default_{name}"] = spec.default
        if spec.default_factory is not _MISSING:
            names[f"_factory_{name}"] = spec.default_factory
        if not spec.init:
            if spec.default is not _MISSING:
                stores.append((name, f"_default_{name}"))
            elif spec.default_factory is not _MISSING:
                stores.append((name, f"_factory_{name}()"))
            continue
        if spec.default is not _MISSING:
            parameter, value = f"{name}=_default_{name}", name
        elif spec.default_factory is not _MISSING:
            parameter = f"{name}=_FACTORY"
            value = f"_factory_{name}() if {name} is _FACTORY else {name}"
        else:
            parameter, value = name, name
        if spec.kw_only:
            keyword.append(parameter)
        else:
            if "=" in parameter:
                defaulted = name
            elif defaulted:
                raise TypeError(f"non-default argument {name!r} follows default argument")
            positional.append(parameter)
        stores.append((name, value))
    body = [f"_set_{name}(self, {value})" for name, value in stores]
    made_in = twin(cls) if len(stores) >= _TWIN_FIELDS else None
    if made_in is not None:  # the same stores as plain ones, in the twin's layout
        names["_Cls"], names["_Twin"], names["_become"] = cls, made_in, object.__setattr__
        plain = [f"self.{name} = {value}" for name, value in stores]
        body = [
            "if self.__class__ is _Cls:",
            "    _become(self, '__class__', _Twin)",
            "    try:",
            *(f"        {line}" for line in plain),
            "    finally:  # itself again, even when a default's factory raised",
            "        self.__class__ = _Cls",
            "else:  # a subclass's instance: its layout may differ",
            *(f"    {line}" for line in body),
        ]
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    parameters = ", ".join(["self", *positional, *(["*", *keyword] if keyword else [])])
    lines = "".join(f"    {line}\n" for line in body) or "    pass\n"
    exec(compiled(f"def __init__({parameters}):\n{lines}"), names)
    init: Callable[..., None] = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {spec.name: spec.type for spec in dataclasses.fields(cls) if spec.init}
    init.__annotations__["return"] = None
    return init


_TWIN_FIELDS = 5
"""From how many fields a record is made in its twin: changing an object's class twice
costs ~120 ns, a field stored plainly ~12 ns against ~45 through its descriptor."""


def twin(cls: type[Any]) -> type[Any] | None:
    """A plain class with ``cls``'s layout (the same slots, on ``object``) and no frozen
    ``__setattr__``, or None when ``cls`` has a base of its own or no slots. An instance
    of it may be given ``cls`` as its class (Python allows it between classes of the same
    layout): a record is made in its twin by plain stores, then becomes itself. One per
    class, shared by its ``__init__``, its copiers and its makers."""
    if cls in _twins:
        return _twins[cls]
    slots = cls.__dict__.get("__slots__")
    made = (
        None
        if cls.__bases__ != (object,) or slots is None
        else type(f"_{cls.__name__}Twin", (object,), {"__slots__": slots})
    )
    _twins[cls] = made
    return made


_twins: dict[type[Any], type[Any] | None] = {}


def _slot(cls: type[Any], name: str) -> Any:
    """The member descriptor of ``name``'s slot (a base record's, for its fields)."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if found is not None and hasattr(found, "__set__"):
            return found
    raise TypeError(f"record {cls.__qualname__}: field {name!r} has no slot")


def maker(cls: type[T], names: tuple[str, ...], **fixed: Any) -> Callable[..., T] | None:
    """``make(*values)``: the record ``cls`` with the fields ``names`` set to ``values``
    (in order) and those of ``fixed`` to theirs: what ``cls(...)`` makes of them, without
    its ``__post_init__``, so for values already checked (a store's decoder reading the
    rows it wrote). Filled in as its :func:`twin` by plain stores. None when ``names`` and
    ``fixed`` are not exactly the fields ``cls``'s ``__init__`` takes, or ``cls`` has no
    twin. A field its ``__init__`` does not take gets its default, as there."""
    layout = twin(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    taken = [f.name for f in fields if f.init]
    if layout is None or sorted(taken) != sorted([*names, *fixed]):
        return None
    namespace: dict[str, Any] = {"_new": object.__new__, "_Twin": layout, "_Cls": cls}
    namespace.update({f"_fixed_{name}": value for name, value in fixed.items()})
    values = [f"v{i}" for i in range(len(names))]
    lines = [f"def make({', '.join(values)}):", "    made = _new(_Twin)"]
    lines += [f"    made.{name} = {value}" for name, value in zip(names, values, strict=True)]
    lines += [f"    made.{name} = _fixed_{name}" for name in fixed]
    for spec in fields:
        if spec.init:
            continue
        if spec.default is not _MISSING:
            namespace[f"_default_{spec.name}"] = spec.default
            lines.append(f"    made.{spec.name} = _default_{spec.name}")
        elif spec.default_factory is not _MISSING:
            namespace[f"_factory_{spec.name}"] = spec.default_factory
            lines.append(f"    made.{spec.name} = _factory_{spec.name}()")
    lines += ["    made.__class__ = _Cls", "    return made"]
    exec(compiled("\n".join(lines)), namespace)  # the names are the class's own fields' names
    make: Callable[..., T] = namespace["make"]
    make.__qualname__ = f"maker({cls.__name__})"
    return make
