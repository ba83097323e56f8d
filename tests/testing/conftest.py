# The root conftest enables plait.testing.pytest_plugin for every test, these included.
