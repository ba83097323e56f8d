"""RandomIds: sortable, unique, and never the same sequence in a forked child."""

from __future__ import annotations

import os

from plait.adapters.system import RandomIds


def test_ids_have_the_documented_shape_and_sort_by_time() -> None:
    ids = RandomIds()
    a = ids.new("msg")
    prefix, _, rest = a.partition("_")
    assert prefix == "msg" and len(rest) == 22
    int(rest, 16)  # hex throughout
    assert len({ids.new("msg") for _ in range(10_000)}) == 10_000


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    ids = RandomIds()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id's random part, then exit at once
        os.write(write, ids.new("x")[-10:].encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 10
    assert child != ids.new("x")[-10:]
