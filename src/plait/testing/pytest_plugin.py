"""A pytest plugin that blocks real network access in every test.

Enable it in the root ``conftest.py``::

    pytest_plugins = ["plait.testing.pytest_plugin"]

A test that really needs the network opts out with ``@pytest.mark.allow_network``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from plait.testing.network import block_network

__all__ = ["plait_block_network", "pytest_configure"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "allow_network: let this test reach the network (plait.testing)"
    )


@pytest.fixture(autouse=True)
def plait_block_network(request: pytest.FixtureRequest) -> Iterator[None]:
    """Autouse: any connection to a non-local address raises RuntimeError."""
    if request.node.get_closest_marker("allow_network") is not None:
        yield
        return
    with block_network():
        yield
