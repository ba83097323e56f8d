"""The packages that re-export their modules' names at first use (PEP 562) export each
name once, as the very object its module defines, and refuse a name they do not have: the
ports (grouped by what uses them, issue 27 item 4) and the domain."""

from __future__ import annotations

import importlib

import pytest

import plait.application.ports as ports
import plait.domain as domain

GROUPS = ("model", "tools", "calls", "stores", "writes", "system", "service")
DOMAIN_MODULES = ("context", "errors", "messages", "runs", "session", "tools")


def test_every_port_is_one_groups_and_the_same_object_from_the_package() -> None:
    seen: dict[str, str] = {}
    for group in GROUPS:
        module = importlib.import_module(f"plait.application.ports.{group}")
        for name in module.__all__:
            assert name not in seen, f"{name} is in both {seen[name]} and {group}"
            seen[name] = group
            assert getattr(ports, name) is getattr(module, name)
    assert sorted(seen) == sorted(ports.__all__)


def test_every_domain_name_is_the_same_object_as_its_modules() -> None:
    found = {}
    for name in DOMAIN_MODULES:
        module = importlib.import_module(f"plait.domain.{name}")
        found.update({n: getattr(module, n) for n in domain.__all__ if hasattr(module, n)})
    assert sorted(found) == sorted(domain.__all__)
    for name, value in found.items():
        assert getattr(domain, name) is value


def test_a_name_the_package_does_not_have_is_an_attribute_error() -> None:
    for package in (ports, domain):
        with pytest.raises(AttributeError, match=f"{package.__name__}' has no attribute 'Nothing'"):
            _ = package.Nothing
    with pytest.raises(ImportError, match="Nothing"):
        from plait.application.ports import Nothing  # type: ignore[attr-defined]  # noqa: F401
