"""Every test runs with real network access blocked (loopback still works): no test may
depend on a provider API or key. A test that really needs more opts out with
``@pytest.mark.allow_network`` (none does)."""

pytest_plugins = ["plait.testing.pytest_plugin"]
