"""Ctrl-C reaches a command whichever thread the kernel hands SIGINT to.

The kernel may deliver a terminal's SIGINT to any thread of the process. With
``asyncio.run`` alone, a main thread asleep in ``epoll_wait`` (a tool's ``sleep 60``
running) noticed it only when the sleep ended. Each probe runs in its own process, so the
signal state is its own.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# The command waits on nothing that will ever come, so the loop sleeps with no timeout;
# the Ctrl-C is delivered to another thread once it sleeps. The probe prints what happened;
# a Ctrl-C left unnoticed leaves the loop asleep, and a watchdog says so after 20 s.
PROBE = """\
import asyncio, os, signal, sys, threading, time
from plait.entrypoints.cli import _loop

HOW = sys.argv[1]
sleeping = threading.Event()

def ctrl_c():
    sleeping.wait()
    time.sleep(0.2)  # the main thread is in epoll_wait by now
    if HOW == "main":
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return
    other = threading.Thread(target=time.sleep, args=(5,), daemon=True)
    other.start()
    signal.pthread_kill(other.ident, signal.SIGINT)  # what the kernel may do
    if HOW == "twice":
        time.sleep(0.5)
        signal.pthread_kill(other.ident, signal.SIGINT)

async def command():
    if HOW == "at-end":  # a Ctrl-C as the command returns: not lost with it
        os.kill(os.getpid(), signal.SIGINT)
        return "finished"
    sleeping.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        print("cancelled", flush=True)
        if HOW == "twice":
            await asyncio.Event().wait()  # a clean-up that hangs: the second Ctrl-C cuts it
        raise

def watchdog():
    time.sleep(20)
    print("asleep", flush=True)
    os._exit(0)

if HOW != "at-end":
    threading.Thread(target=ctrl_c, daemon=True).start()
threading.Thread(target=watchdog, daemon=True).start()
try:
    print(_loop.run(command()), flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
print("default" if signal.getsignal(signal.SIGINT) is signal.default_int_handler else "changed")
print(_loop.run(asyncio.sleep(0, result="again")))
"""


def _probe(how: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, how], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("how", ["main", "other"])
def test_ctrl_c_cancels_the_command_on_any_thread(how: str) -> None:
    # cancelled inside, KeyboardInterrupt outside, Python's handler back, the loop reusable
    assert _probe(how) == ["cancelled", "interrupted", "default", "again"]


def test_a_second_ctrl_c_cuts_a_slow_clean_up() -> None:
    assert _probe("twice") == ["cancelled", "interrupted", "default", "again"]


def test_a_ctrl_c_as_the_command_ends_still_interrupts_it() -> None:
    assert _probe("at-end") == ["interrupted", "default", "again"]


def test_without_ctrl_c_the_result_comes_back() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import asyncio, signal\n"
            "from plait.entrypoints.cli import _loop\n"
            "print(_loop.run(asyncio.sleep(0.01, result='done')))\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["done", "True"], done.stderr
