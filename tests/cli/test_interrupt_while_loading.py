"""Ctrl-C while the command's modules load is noted and acted on once they have loaded:
an interrupt raised inside an extension module's initialisation can come out as another
error with a traceback (a ``TypeError`` from ``_ssl`` was seen in CI)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """\
import atexit, importlib.abc, os, signal, sys

class InterruptOnce(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "plait.entrypoints.cli.main":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the command's modules load
        return None

def loaded():
    module = sys.modules.get("plait.entrypoints.cli.main")
    print("LOADED" if module is not None and hasattr(module, "main") else "CUT", flush=True)

atexit.register(loaded)
sys.meta_path.insert(0, InterruptOnce())
sys.argv = ["plait", "--version"]
from plait.entrypoints.cli import run
run()
"""


def test_ctrl_c_while_the_modules_load_waits_for_them_then_exits_130() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert "plait: interrupted" in done.stderr
    assert done.stdout.strip().endswith("LOADED")  # not cut in the middle of an import
    assert "plait " not in done.stdout  # the command itself never ran
