"""``record``: a frozen slotted dataclass whose ``__init__`` sets the slots directly, held
to what ``@dataclass(frozen=True, slots=True)`` makes of the same class."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import pytest

from plait.application import events, ports, validation
from plait.domain import context, messages, runs, session
from plait.domain import record as record_module
from plait.domain.record import maker, record, twin

T = TypeVar("T")
Decorate = Callable[..., Any]


def shapes(frozen: Decorate, kw: Decorate) -> dict[str, type[Any]]:
    """The same classes, made by ``frozen`` (positional) and ``kw`` (keyword-only)."""

    @frozen
    class Plain:
        a: int
        b: str

    @frozen
    class Defaults:
        a: int
        b: str = "b"
        c: tuple[int, ...] = ()
        d: list[int] = dataclasses.field(default_factory=list)

    @kw
    class Keywords:
        a: int
        b: str | None = None
        tags: dict[str, int] = dataclasses.field(default_factory=dict)
        _cache: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)
        _made: list[int] = dataclasses.field(default_factory=list, init=False, compare=False)

    @frozen
    class Mixed:
        a: int
        b: int = 2
        c: int = dataclasses.field(default=3, kw_only=True)
        d: int = dataclasses.field(kw_only=True, default=4)

    @kw
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError(f"n must not be negative, got {self.n}")
            object.__setattr__(self, "n", self.n * 2)  # a post-init may normalise

    @kw
    class Base:
        a: int
        b: str = "b"

    @kw
    class Derived(Base):
        c: float = 1.5

    @kw
    class Box(Generic[T]):
        item: T
        others: tuple[T, ...] = ()

    @kw
    class Empty:
        pass

    @frozen
    class Wide:  # five fields or more: made in its twin
        a: int
        b: str
        c: float = 0.5
        d: tuple[int, ...] = ()
        e: list[int] = dataclasses.field(default_factory=list)
        f: Any = dataclasses.field(default=None, init=False, compare=False)
        g: int = dataclasses.field(default=7, kw_only=True)

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError(f"a must not be negative, got {self.a}")

    return {
        c.__name__: c
        for c in (Plain, Defaults, Keywords, Mixed, Checked, Derived, Box, Empty, Wide)
    }


OURS = shapes(record, record(kw_only=True))
THEIRS = shapes(
    dataclasses.dataclass(frozen=True, slots=True),
    dataclasses.dataclass(frozen=True, slots=True, kw_only=True),
)

CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("Plain", (1, "x"), {}),
    ("Plain", (1,), {"b": "x"}),
    ("Plain", (), {"a": 1, "b": "x"}),
    ("Plain", (1,), {}),  # missing b
    ("Plain", (1, "x", 3), {}),  # too many
    ("Plain", (1, "x"), {"c": 3}),  # unexpected
    ("Plain", (1,), {"a": 2, "b": "x"}),  # a twice
    ("Defaults", (1,), {}),
    ("Defaults", (1, "q", (2,), [3]), {}),
    ("Defaults", (), {"a": 1, "d": [9]}),
    ("Keywords", (), {"a": 1}),
    ("Keywords", (), {"a": 1, "b": "s", "tags": {"k": 1}}),
    ("Keywords", (1,), {}),  # positional where keyword-only
    ("Keywords", (), {"a": 1, "_cache": 2}),  # an init=False field is not a parameter
    ("Keywords", (), {}),
    ("Mixed", (1,), {}),
    ("Mixed", (1, 5), {"c": 6, "d": 7}),
    ("Mixed", (1, 5, 6), {}),
    ("Checked", (), {"n": 3}),
    ("Checked", (), {"n": -1}),
    ("Derived", (), {"a": 1}),
    ("Derived", (), {"a": 1, "b": "x", "c": 2.5}),
    ("Derived", (), {"c": 2.5}),
    ("Box", (), {"item": "x", "others": ("y",)}),
    ("Empty", (), {}),
    ("Empty", (1,), {}),
    ("Wide", (1, "x"), {}),
    ("Wide", (1, "x", 2.5, (3,), [4]), {"g": 8}),
    ("Wide", (), {"a": 1, "b": "x", "e": [1]}),
    ("Wide", (-1, "x"), {}),  # __post_init__ refuses
    ("Wide", (1,), {}),  # missing b
    ("Wide", (1, "x"), {"f": 2}),  # an init=False field is not a parameter
    ("Wide", (1, "x", 2.5, (3,), [4], 9), {}),  # g is keyword-only
]


def _outcome(cls: type[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        made = cls(*args, **kwargs)
    except (TypeError, ValueError) as error:
        message = str(error).replace("__create_fn__.<locals>.", "")
        return (type(error).__name__, message)
    values = {f.name: getattr(made, f.name, "<unset>") for f in dataclasses.fields(made)}
    return (repr(made), values)


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS)
def test_construction_matches_the_dataclass(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert _outcome(OURS[name], args, kwargs) == _outcome(THEIRS[name], args, kwargs)


@pytest.mark.parametrize("name", sorted(OURS))
def test_signature_and_behaviour_match_the_dataclass(name: str) -> None:
    ours, theirs = OURS[name], THEIRS[name]
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert str(inspect.signature(ours.__init__)) == str(inspect.signature(theirs.__init__))
    assert ours.__slots__ == theirs.__slots__
    assert ours.__match_args__ == theirs.__match_args__
    assert ours.__doc__ == theirs.__doc__
    assert [repr(f) for f in dataclasses.fields(ours)] == [
        repr(f) for f in dataclasses.fields(theirs)
    ]
    assert ours.__init__.__qualname__ == f"{ours.__qualname__}.__init__"


def _class_of(cls: type[Any]) -> tuple[Any, ...]:
    """Everything dataclasses records of a class: its attributes' names, each field whole,
    its parameters."""
    fields = [
        (
            *(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash),
            *(f.compare, dict(f.metadata), f.kw_only, getattr(f, "_field_type", None)),
        )
        for f in cls.__dataclass_fields__.values()
    ]
    params = cls.__dataclass_params__
    return (
        sorted(vars(cls)),
        fields,
        {name: getattr(params, name) for name in type(params).__slots__},
        cls.__qualname__,
    )


@pytest.mark.parametrize("name", sorted(OURS))
def test_the_class_is_the_dataclass_s(name: str) -> None:
    """A record without a base of its own is made without dataclasses: the same fields,
    parameters and attributes as it would make."""
    assert _class_of(OURS[name]) == _class_of(THEIRS[name])


def test_special_annotations_are_left_to_dataclasses() -> None:
    @record(kw_only=True)
    class Special:
        limit: ClassVar[int] = 3
        a: int
        b: int = dataclasses.field(default=2, kw_only=False)

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Theirs:
        limit: ClassVar[int] = 3
        a: int
        b: int = dataclasses.field(default=2, kw_only=False)

    assert _class_of(Special)[1:3] == _class_of(Theirs)[1:3]
    assert Special.limit == 3
    assert [f.name for f in dataclasses.fields(Special)] == ["a", "b"]
    assert Special(5, a=1) == Special(a=1, b=5)


def test_a_record_whose_methods_use_super_is_left_to_dataclasses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Newer Pythons' dataclasses point a slotted class's ``super()`` at the class they
    make: such a class is theirs to make."""
    made_by_dataclasses: list[str] = []
    real = dataclasses.dataclass

    def counting(cls: Any = None, /, **options: Any) -> Any:
        made_by_dataclasses.append(cls.__name__)
        return real(cls, **options)

    monkeypatch.setattr(dataclasses, "dataclass", counting)

    @record
    class Plain:
        a: int

        def describe(self) -> str:
            return f"plain {self.a}"

    @record
    class UsesSuper:
        a: int

        def __repr__(self) -> str:
            return "U" + super().__repr__()

    @record
    class PropertyUsesSuper:
        a: int

        @property
        def shown(self) -> str:
            return super().__str__()

    assert made_by_dataclasses == ["UsesSuper", "PropertyUsesSuper"]
    assert not record_module._refers_to_its_class(vars(Plain)["describe"])
    assert Plain(1).describe() == "plain 1"


def test_passed_values_are_kept_as_they_are_and_defaults_are_fresh() -> None:
    items = [1]
    made = OURS["Defaults"](1, "b", (), items)
    assert made.d is items
    first, second = OURS["Defaults"](1), OURS["Defaults"](2)
    assert first.d == [] and first.d is not second.d  # default_factory: one per record
    one, two = OURS["Keywords"](a=1), OURS["Keywords"](a=2)
    assert one._cache is None and one._made == [] and one._made is not two._made
    assert OURS["Checked"](n=3).n == 6  # __post_init__ ran, once


def test_records_stay_frozen_comparable_and_picklable() -> None:
    made = OURS["Derived"](a=1, b="x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2
    assert made == OURS["Derived"](a=1, b="x")
    assert hash(made) == hash(OURS["Derived"](a=1, b="x"))
    assert dataclasses.replace(made, c=3.0).c == 3.0
    usage = messages.Usage(input_tokens=3, output_tokens=4)  # a record of plait's
    assert pickle.loads(pickle.dumps(usage)) == usage
    assert not hasattr(made, "__dict__")


def test_what_the_dataclass_refuses_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @record
        class Bad:
            a: int = 1
            b: int  # type: ignore[misc]

    with pytest.raises(ValueError, match="mutable default <class 'list'> for field a"):

        @record
        class Mutable:
            a: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="'b' is a field but has no type annotation"):

        @record
        class Unannotated:
            a: int
            b = dataclasses.field(default=1)

    with pytest.raises(TypeError, match="WithSlots already specifies __slots__"):

        @record
        class WithSlots:
            __slots__ = ("a",)
            a: int

    with pytest.raises(TypeError, match="InitVar fields are not supported"):

        @record
        class WithInitVar:
            a: int
            seed: dataclasses.InitVar[int]


PLAIT_RECORDS = [
    cls
    for module in (messages, session, runs, context, ports, validation, events)
    for cls in vars(module).values()
    if isinstance(cls, type)
    and dataclasses.is_dataclass(cls)
    and cls.__init__.__globals__.get("_FACTORY") is not None
]


def test_plait_records_take_exactly_their_fields() -> None:
    """Each of plait's records takes its init fields, in order, keyword-only where the
    field is, with the field's default; and sets every field."""
    assert len(PLAIT_RECORDS) >= 28
    for cls in PLAIT_RECORDS:
        parameters = list(inspect.signature(cls).parameters.values())
        fields = [f for f in dataclasses.fields(cls) if f.init]
        assert sorted(p.name for p in parameters) == sorted(f.name for f in fields), cls
        by_name = {f.name: f for f in fields}
        for parameter in parameters:
            f = by_name[parameter.name]
            keyword = parameter.kind is inspect.Parameter.KEYWORD_ONLY
            assert keyword == f.kw_only, (cls, f.name)
            if f.default is not dataclasses.MISSING:
                assert parameter.default is f.default, (cls, f.name)
            elif f.default_factory is not dataclasses.MISSING:
                assert repr(parameter.default) == "<factory>", (cls, f.name)
            else:
                assert parameter.default is inspect.Parameter.empty, (cls, f.name)


def test_a_step_s_records_are_made_as_before() -> None:
    call = messages.ToolCall(id="c1", name="echo", arguments_json='{"text":"x"}')
    assert call._decoded is None and call.arguments() == {"text": "x"}
    with pytest.raises(Exception, match="must be a JSON object"):
        messages.ToolCall(id="c1", name="echo", arguments_json="[]")
    response = ports.ModelResponse(text="hi")
    assert response.usage == messages.Usage() and response.tool_calls == ()


def test_a_wide_record_is_made_in_its_twin_and_is_its_own_class_after() -> None:
    made = OURS["Wide"](1, "x")
    assert type(made) is OURS["Wide"]
    assert "Twin" not in repr(made) and made == OURS["Wide"](1, "x")
    assert "_Twin" in OURS["Wide"].__init__.__code__.co_names  # five fields or more
    assert "_Twin" not in OURS["Plain"].__init__.__code__.co_names
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2


def test_a_subclass_of_a_wide_record_keeps_its_class() -> None:
    """A subclass's instance (another layout: it has a ``__dict__``) is filled in
    through the slots' descriptors, and stays of its class."""

    wide: type[Any] = OURS["Wide"]

    class Sub(wide):  # type: ignore[misc]
        pass

    made = Sub(1, "x", g=3)
    assert type(made) is Sub
    assert (made.a, made.b, made.c, made.e, made.g) == (1, "x", 0.5, [], 3)


def test_a_failing_default_factory_fails_the_call() -> None:
    def broken() -> list[int]:
        raise RuntimeError("no default today")

    @record
    class Six:
        a: int
        b: int
        c: int
        d: int
        e: int
        f: list[int] = dataclasses.field(default_factory=broken)

    with pytest.raises(RuntimeError, match="no default today"):
        Six(1, 2, 3, 4, 5)
    made = Six(1, 2, 3, 4, 5, [6])
    with pytest.raises(RuntimeError, match="no default today"):
        made.__init__(7, 8, 9, 10, 11)  # type: ignore[misc]
    assert type(made) is Six  # not left in its twin
    assert Six(1, 2, 3, 4, 5, [6]).f == [6]


def test_a_maker_makes_what_the_constructor_makes_without_its_checks() -> None:
    wide = OURS["Wide"]
    make = maker(wide, ("b", "a", "c", "d", "e"), g=9)
    assert make is not None and make.__qualname__ == "maker(Wide)"
    made = make("x", 1, 2.5, (3,), [4])
    assert type(made) is wide
    assert made == wide(1, "x", 2.5, (3,), [4], g=9)
    assert made.g == 9
    assert made.f is None  # not a parameter of __init__: its default, as there
    assert make("x", -1, 0.5, (), []).a == -1  # __post_init__ would refuse it: not run
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 2
    assert copy.copy(made) == made and copy.copy(made).f is None


def test_a_maker_needs_exactly_the_init_fields_and_a_twin() -> None:
    wide = OURS["Wide"]
    assert maker(wide, ("a", "b", "c", "d")) is None  # e and g missing
    assert maker(wide, ("a", "b", "c", "d", "e", "f", "g")) is None  # f is not a parameter
    assert maker(wide, ("a", "b", "c", "d", "e"), g=1, h=2) is None
    assert maker(OURS["Derived"], ("a", "b", "c")) is None  # its slots are spread over a base
    call = maker(messages.ToolCall, ("id", "name", "arguments_json"))
    assert call is not None
    made = call("c1", "echo", '{"text": "hi"}')
    assert made._decoded is None and made.arguments() == {"text": "hi"}
    assert pickle.loads(pickle.dumps(made)) == made


def test_a_record_has_one_twin() -> None:
    assert twin(session.ExecutionRecord) is twin(session.ExecutionRecord) is not None
    assert twin(OURS["Derived"]) is None


def test_methods_made_without_compiling_behave_as_the_dataclass_s() -> None:
    """``__repr__``, ``__eq__``, ``__hash__`` and the frozen ``__setattr__`` are closures
    over the fields, not compiled: the same answers as the dataclass's, for fields left
    out of repr, comparison or hash, a class's own methods, and a record that subclasses a
    frozen dataclass."""

    def shape(frozen: Decorate) -> tuple[type[Any], type[Any], type[Any]]:
        @frozen
        class Fields:
            a: int
            b: float = dataclasses.field(default=0.0, repr=False)
            c: list[int] = dataclasses.field(default_factory=list, compare=False)
            d: str = dataclasses.field(default="d", hash=False)

        @frozen
        class Own:
            a: int

            def __eq__(self, other: object) -> bool:
                return True

            def __repr__(self) -> str:
                return "own"

        @dataclasses.dataclass(frozen=True)
        class Parent:
            p: int

        @frozen
        class Child(Parent):
            q: int = 0

        return Fields, Own, Child

    ours, theirs = shape(record), shape(dataclasses.dataclass(frozen=True, slots=True))
    for Fields, Own, Child in (ours, theirs):
        one, same = Fields(1, float("nan"), [1], "x"), Fields(1, float("nan"), [2], "x")
        assert one == one and one != Fields(1, 0.0, [1], "x")
        assert one != same  # two different NaN objects: unequal in either
        assert one == Fields(1, one.b, [3], "x")  # c is not compared; the same NaN is
        assert hash(Fields(1, 2.0, [], "x")) == hash(Fields(1, 2.0, [9], "y"))  # d, c: no
        assert (Fields(1) == (1,)) is False and one.__eq__(1) is NotImplemented
        assert Own(1) == Own(2) and repr(Own(1)) == "own"
        assert hash(Own(1)) == hash((1,))  # its __eq__ kept, a hash of the fields added
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'q'"):
            Child(1).q = 2
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'p'"):
            del Child(1).p
    for made_here in ours:
        assert made_here.__dataclass_params__.frozen and made_here.__dataclass_params__.eq
    assert repr(ours[0](1, 2.0, [3])) == repr(theirs[0](1, 2.0, [3])).replace(
        theirs[0].__qualname__, ours[0].__qualname__
    )
    assert repr(ours[2](1, 2)).endswith(".<locals>.shape.<locals>.Child(p=1, q=2)")
    made = ours[0](1, 2.0, [3], "x")
    assert copy.deepcopy(made) == made and copy.copy(made) == made  # (__getstate__ is ours)
    usage = messages.Usage(input_tokens=3, output_tokens=4)
    assert usage.__getstate__() == [3, 4, 0, 0] and pickle.loads(pickle.dumps(usage)) == usage
