"""``Later``: a module imported at its first use, optionally put in its own place then."""

from __future__ import annotations

import builtins
import importlib
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from plait.adapters.stores.shared.later import Later

NAME = "plait.adapters.stores.shared.session_pages"  # small, not imported by these tests


def test_the_first_attribute_read_imports_the_module() -> None:
    sys.modules.pop(NAME, None)
    later = Later(NAME)
    assert NAME not in sys.modules
    assert callable(later.session_page_sql)
    assert NAME in sys.modules


def test_a_bound_later_puts_the_module_in_its_place_at_the_first_read() -> None:
    namespace: dict[str, Any] = {}
    namespace["pages"] = Later(NAME, namespace, "pages")
    assert isinstance(namespace["pages"], Later)
    found = namespace["pages"].session_page_sql
    bound: object = namespace["pages"]
    assert bound is sys.modules[NAME]  # later reads go to the module itself
    assert found is sys.modules[NAME].session_page_sql


def test_a_binding_needs_both_its_namespace_and_its_name() -> None:
    with pytest.raises(ValueError, match="names its binding"):
        Later(NAME, {}, None)
    with pytest.raises(ValueError, match="names its binding"):
        Later(NAME, None, "pages")


def test_a_missing_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        _ = Later(NAME).no_such_name


def test_load_deferred_imports_every_module_the_sqlite_store_defers() -> None:
    from plait.adapters.stores.sqlite import store

    store.load_deferred()
    left = [name for name, value in vars(store).items() if isinstance(value, Later)]
    bound = ("codec", "shared_rows", "state", "_sqlite_commit", "messages", "recall")
    assert not [name for name in left if name in bound]  # put in their places
    for name in ("approvals", "fork", "retention", "service", "summaries", "webhooks"):
        assert f"plait.adapters.stores.sqlite.{name}" in sys.modules


def test_a_module_another_thread_is_importing_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module is in ``sys.modules`` from the first line of its import; a read from
    another thread meanwhile waits for the import to finish instead of finding the
    module half made (a worker once failed so: "partially initialized module ... has no
    attribute 'claim_queued'")."""
    (tmp_path / "slow_to_import.py").write_text(
        "import builtins, time\nbuiltins._slow_import_started.set()\ntime.sleep(0.3)\nanswer = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)
    started = threading.Event()
    monkeypatch.setattr(builtins, "_slow_import_started", started, raising=False)
    importer = threading.Thread(target=importlib.import_module, args=("slow_to_import",))
    importer.start()
    try:
        assert started.wait(10)
        assert "slow_to_import" in sys.modules  # half made now
        assert Later("slow_to_import").answer == 42
    finally:
        importer.join()
        sys.modules.pop("slow_to_import", None)
