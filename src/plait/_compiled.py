"""The compiled code of the functions plait writes as it defines its classes, kept between
processes the way Python keeps a module's bytecode.

A record's ``__init__`` and the makers and copiers of :mod:`plait.domain.record` and
:mod:`plait.domain._copy` are generated as source and compiled when their class is defined.
Compiling was most of what defining a record cost: 0.25-0.3 ms each on a slow host, 5-6 ms
of ``Runtime.open`` and 17-21 ms of a CLI command (which defines about a hundred). The
source of each is a pure function of its class, so its code object can be reused as a
module's ``.pyc`` is: :func:`compiled` looks the source up first.

Where: one file beside this package's bytecode (``__pycache__``, or under
``sys.pycache_prefix``), named for the interpreter (``_compiled.cpython-311.codes``). What:
the interpreter's magic number, then a marshalled ``dict`` from source text to its code
object, itself marshalled (each is read when asked for: a process that defines twenty
records does not read the hundred and fifty a CLI command defines).
The key is the whole source, so a changed class compiles anew and never runs stale code.
When: read once, at the first function compiled; written at the process's exit if it
compiled anything the file did not hold (not when Python writes no bytecode,
``PYTHONDONTWRITEBYTECODE``), merged with what other processes wrote meanwhile, and
replaced atomically. A file that cannot be read, is damaged or was written by another
Python is ignored (everything compiles as before); one that cannot be written is left
alone. Entries no process asks for again are dropped once the file would hold more than
:data:`MAX_CODES`: it is then rewritten with this process's own.

It sits below the layers (like the import system it imitates): the domain's classes use
it, nothing in it knows of them.
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import sys
from collections.abc import Callable
from types import CodeType

try:  # the import system's own module, loaded with the interpreter (importlib.util is not)
    from importlib._bootstrap_external import MAGIC_NUMBER, cache_from_source
except ImportError:  # pragma: no cover - an interpreter without it
    from importlib.util import MAGIC_NUMBER, cache_from_source

__all__ = ["MAX_CODES", "CodeCache", "compiled"]

MAX_CODES = 4096
"""How many code objects the file keeps at most (a CLI command compiles about 150)."""

_FORMAT = b"plc1"
"""This file format's version, after the interpreter's magic number."""

_MAX_BYTES = 16 * 1024 * 1024
"""A larger file is not read (it was not written here)."""


class CodeCache:
    """The code objects of one file (``locate()``: its path, None for none), read at the
    first :meth:`code`; :meth:`save` is handed to ``at_exit`` once something new is
    compiled."""

    def __init__(
        self,
        locate: Callable[[], str | None],
        at_exit: Callable[[Callable[[], None]], object] = atexit.register,
    ) -> None:
        self._locate = locate
        self._at_exit = at_exit
        self.path: str | None = None
        self.loaded: dict[str, bytes] | None = None
        """The file's entries: each source's code object, marshalled."""
        self.used: dict[str, bytes] = {}
        """The entries this process asked for (what the file keeps when it is full)."""
        self.new = 0
        """How many sources were compiled here and not written yet."""
        self._saving = False

    def code(self, source: str) -> CodeType:
        if self.loaded is None:
            self.path = self._locate()
            self.loaded = _read(self.path)
        entry = self.loaded.get(source)
        code = None if entry is None else _code(entry)
        if entry is None or code is None:
            code = compile(source, "<string>", "exec")
            if self.path is None or sys.dont_write_bytecode:
                return code  # nothing will be written
            entry = self.loaded[source] = marshal.dumps(code)
            self.new += 1
            if not self._saving:
                self._saving = True
                self._at_exit(self.save)
        self.used[source] = entry
        return code

    def save(self) -> None:
        """Write what this process compiled, merged with the file as it is now."""
        path = self.path
        if path is None or not self.new:
            return
        merged = {**_read(path), **self.used}
        if len(merged) > MAX_CODES:
            merged = dict(self.used)
        data = MAGIC_NUMBER + _FORMAT + marshal.dumps(merged)
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(temporary, "wb") as out:
                out.write(data)
            os.replace(temporary, path)
        except OSError:  # a read-only install: every process compiles, as before
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        else:
            self.new = 0


def _cache_path() -> str | None:
    """The file, or None where this interpreter keeps no bytecode cache."""
    if not __file__.endswith(".py"):  # installed as bytecode alone
        return None
    try:
        beside = cache_from_source(__file__)
    except (NotImplementedError, ValueError):
        return None
    return beside.rsplit(".", 1)[0].removesuffix(".opt-1").removesuffix(".opt-2") + ".codes"


def _read(path: str | None) -> dict[str, bytes]:
    """The entries of the file; none if it is missing, damaged or another Python's."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as source:
            data = source.read(_MAX_BYTES + 1)
    except OSError:
        return {}
    head = MAGIC_NUMBER + _FORMAT
    if len(data) > _MAX_BYTES or not data.startswith(head):
        return {}
    try:
        entries = marshal.loads(data[len(head) :])
    except (EOFError, ValueError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {
        text: entry
        for text, entry in entries.items()
        if isinstance(text, str) and isinstance(entry, bytes)
    }


def _code(entry: bytes) -> CodeType | None:
    """An entry's code object; None if it is damaged (it is compiled again)."""
    try:
        code = marshal.loads(entry)
    except (EOFError, ValueError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


_cache = CodeCache(_cache_path)


def compiled(source: str) -> CodeType:
    """``compile(source, "<string>", "exec")``, from the file when a process compiled the
    same source before."""
    return _cache.code(source)
