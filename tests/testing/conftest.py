# Dogfood the network guard shipped in plait.testing: every test here runs with it.
from plait.testing.pytest_plugin import plait_block_network

__all__ = ["plait_block_network"]
