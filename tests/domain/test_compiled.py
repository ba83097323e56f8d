"""The code cache of generated functions (plait._compiled): a record's ``__init__`` is
compiled once, in the first process that defines it, and read back by the next ones; a file
that is damaged, another Python's or not writable changes nothing but the time it takes."""

from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import plait._compiled as compiled_module
from plait._compiled import CodeCache, compiled

SOURCE = "def f(a, *, b=2):\n    return a + b\n"

# Defines the records of the domain's messages, then says what the cache did.
PROBE = (
    "import plait._compiled as c; import plait.domain.messages; "
    "print(c._cache.path, len(c._cache.used), c._cache.new)"
)


@pytest.fixture(autouse=True)
def _writes_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """As an installed plait runs (the suite itself runs with PYTHONDONTWRITEBYTECODE)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def _cache(path: Path) -> tuple[CodeCache, list[Callable[[], None]]]:
    registered: list[Callable[[], None]] = []
    return CodeCache(lambda: str(path), registered.append), registered


def _run(env_prefix: Path, *, write: bool = True) -> tuple[Path, int, int]:
    """A fresh interpreter with its bytecode cache under ``env_prefix``: the cache file's
    path, how many sources it asked for, how many it compiled."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(env_prefix)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    path, used, new = done.stdout.split()
    return Path(path), int(used), int(new)


def test_compiled_code_runs_as_compile_would() -> None:
    namespace: dict[str, object] = {}
    exec(compiled(SOURCE), namespace)
    function = namespace["f"]
    assert callable(function)
    assert function(1) == 3
    assert function(1, b=5) == 6


def test_a_second_process_compiles_nothing(tmp_path: Path) -> None:
    path, used, new = _run(tmp_path)
    assert used >= 5  # the messages' records
    assert new == used  # nothing cached yet: all compiled
    assert path.is_file()
    assert str(path).startswith(str(tmp_path))  # beside the bytecode, under the prefix
    again, used_again, new_again = _run(tmp_path)
    assert again == path
    assert (used_again, new_again) == (used, 0)


def test_no_file_when_python_writes_no_bytecode(tmp_path: Path) -> None:
    path, used, new = _run(tmp_path, write=False)
    assert (used, new) == (0, 0)  # compiled, and nothing kept to write
    assert not path.exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage",
        importlib.util.MAGIC_NUMBER + b"plc1" + b"\x00\x01 not marshal",
        importlib.util.MAGIC_NUMBER + b"plc1" + marshal.dumps([1, 2, 3]),
        importlib.util.MAGIC_NUMBER + b"plc1" + marshal.dumps({SOURCE: "not bytes"}),
        importlib.util.MAGIC_NUMBER + b"plc1" + marshal.dumps({SOURCE: b"not marshal"}),
        importlib.util.MAGIC_NUMBER + b"plc1" + marshal.dumps({SOURCE: marshal.dumps(1)}),
        b"\x00\x00\r\n" + b"plc1" + marshal.dumps({}),  # another Python's magic number
        importlib.util.MAGIC_NUMBER + b"plc0" + marshal.dumps({}),  # another format
    ],
    ids=[
        "empty",
        "garbage",
        "damaged",
        "not-a-dict",
        "not-bytes",
        "not-marshal",
        "not-code",
        "other-python",
        "format",
    ],
)
def test_an_unusable_file_is_ignored_and_replaced(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "codes"
    path.write_bytes(content)
    cache, registered = _cache(path)
    namespace: dict[str, object] = {}
    exec(cache.code(SOURCE), namespace)
    assert cache.new == 1
    assert registered == [cache.save]
    cache.save()
    fresh, _ = _cache(path)
    fresh.code(SOURCE)
    assert fresh.new == 0  # read back from the rewritten file


def test_a_process_adds_to_what_others_wrote(tmp_path: Path) -> None:
    path = tmp_path / "codes"
    first, _ = _cache(path)
    second, _ = _cache(path)
    first.code(SOURCE)
    second.code("x = 1\n")  # read the file (none yet) before the first one wrote it
    first.save()
    second.save()
    third, registered = _cache(path)
    third.code(SOURCE)
    third.code("x = 1\n")
    assert third.new == 0
    assert registered == []  # nothing to write


def test_a_full_file_keeps_this_process_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "codes"
    monkeypatch.setattr(compiled_module, "MAX_CODES", 3)
    old, _ = _cache(path)
    for n in range(3):
        old.code(f"x = {n}\n")
    old.save()
    cache, _ = _cache(path)
    cache.code("x = 0\n")
    cache.code("y = 1\n")
    cache.save()  # 4 would be one too many: only this process's two are kept
    entries = marshal.loads(path.read_bytes()[len(importlib.util.MAGIC_NUMBER) + 4 :])
    assert sorted(entries) == ["x = 0\n", "y = 1\n"]


def test_a_file_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the cache's directory would be")
    cache, registered = _cache(blocked / "codes")
    namespace: dict[str, object] = {}
    exec(cache.code(SOURCE), namespace)
    cache.save()  # raises nothing
    assert not (blocked / "codes").exists()
    assert list(tmp_path.iterdir()) == [blocked]  # no temporary file left behind
    assert registered == [cache.save]


def test_nothing_is_written_when_python_writes_no_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache, registered = _cache(tmp_path / "codes")
    cache.code(SOURCE)
    assert registered == []


def test_without_a_path_nothing_is_read_or_written() -> None:
    registered: list[Callable[[], None]] = []
    cache = CodeCache(lambda: None, registered.append)
    cache.code(SOURCE)
    cache.save()
    assert registered == []
