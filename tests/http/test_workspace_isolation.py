"""Workspaces of sessions created over HTTP: a principal's workspace names resolve in a
directory of its own under ``PLAIT_WORKSPACE_ROOT``; no name, ``..``, absolute path or
symbolic link reaches another principal's directory or anything outside the root; an
admin may bind an explicit directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from plait.entrypoints.http.workspaces import principal_directory
from tests.http.conftest import Live, serve_live
from tests.http.test_api import error, new_session, wait_terminal
from tests.pg import empty_database


@pytest.fixture
def rooted(tmp_path: Path) -> Iterator[Live]:
    yield from serve_live(tmp_path, workspace_root=tmp_path / "ws")


@pytest.fixture
def rooted_pg(tmp_path: Path, pg_url: str) -> Iterator[Live]:
    empty_database(pg_url)
    yield from serve_live(tmp_path, pg_url=pg_url, workspace_root=tmp_path / "ws")


def _root(live: Live) -> Path:
    return (live.store_path.parent / "ws").resolve()


def _home(live: Live, principal: str) -> Path:
    """The directory of ``principal``'s workspaces."""
    return _root(live) / f"@{principal}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_principals_naming_the_same_workspace_get_separate_directories(
    backend: str, request: pytest.FixtureRequest
) -> None:
    live: Live = request.getfixturevalue("rooted" if backend == "sqlite" else "rooted_pg")
    with live.client("alice") as alice, live.client("bob") as bob:
        mine = new_session(alice, workspace="proj")
        theirs = new_session(bob, workspace="proj")
        assert mine["workspace"] == str(_home(live, "alice") / "proj")
        assert theirs["workspace"] == str(_home(live, "bob") / "proj")
        # Files one principal's session leaves are not in the other's workspace.
        Path(mine["workspace"], "notes.txt").write_text("alice's\n")
        assert not Path(theirs["workspace"], "notes.txt").exists()
        # The same name again is the same directory for the same principal.
        assert new_session(alice, workspace="proj")["workspace"] == mine["workspace"]
        nested = new_session(bob, workspace="team/proj")["workspace"]
        assert nested == str(_home(live, "bob") / "team" / "proj")
        for client, session in ((alice, mine), (bob, theirs)):
            run = client.post(
                f"/v1/sessions/{session['session_id']}/messages", json={"text": "tool hi"}
            ).json()
            assert wait_terminal(client, run["run_id"])["status"] == "completed"
        stored = bob.get(f"/v1/sessions/{theirs['session_id']}").json()
        assert stored["workspace"] == theirs["workspace"]


@pytest.mark.slow
def test_workspace_names_cannot_climb_out_of_the_principals_directory(rooted: Live) -> None:
    root = _root(rooted)
    with rooted.client("alice") as alice, rooted.client("bob") as bob:
        bobs = new_session(bob, workspace="proj")["workspace"]
        Path(bobs, "secret").write_text("bob's\n")
        for name in ("..", ".", "../bob/proj", "a/../../bob/proj", "./proj", "proj/..", "a//b"):
            error(alice.post("/v1/sessions", json={"workspace": name}), 422, "invalid_request")
        for name in ("x\x00y", "proj/", "-rf", "", "a\\..\\b"):
            assert alice.post("/v1/sessions", json={"workspace": name}).status_code == 422
        for name in ("/", str(root), str(_home(rooted, "bob") / "proj"), "/etc"):
            err = error(alice.post("/v1/sessions", json={"workspace": name}), 403, "forbidden")
            assert "only an admin" in err["message"]
        assert alice.get("/v1/sessions").json()["sessions"] == []
        # Nothing was created anywhere: only bob's directory exists under the root.
        assert sorted(p.name for p in root.iterdir()) == ["@bob"]
        assert sorted(p.name for p in Path(bobs).iterdir()) == ["secret"]


@pytest.mark.slow
def test_a_symlink_in_the_workspace_tree_is_refused_not_followed(
    rooted: Live, tmp_path: Path
) -> None:
    root = _root(rooted)
    outside = tmp_path / "outside"
    outside.mkdir()
    with rooted.client("alice") as alice, rooted.client("bob") as bob:
        bobs = Path(new_session(bob, workspace="proj")["workspace"])
        new_session(alice, workspace="home")
        # Links in alice's own directory, to bob's workspace and out of the root.
        home = _home(rooted, "alice")
        (home / "to-bob").symlink_to(bobs)
        (home / "out").symlink_to(outside)
        (home / "rel").symlink_to("../@bob")
        for name, segment in (("to-bob", "to-bob"), ("out/x", "out"), ("rel/proj", "rel")):
            err = error(alice.post("/v1/sessions", json={"workspace": name}), 400, "invalid_value")
            assert f"{segment!r} on its way is a symbolic link" in err["message"]
            assert err["details"] == {"workspace": name}
        # A principal directory replaced by a link to another principal's.
        os.rename(home, root / "alice.old")
        home.symlink_to(_home(rooted, "bob"))
        err = error(alice.post("/v1/sessions", json={"workspace": "proj"}), 400, "invalid_value")
        assert "'@alice' on its way is a symbolic link" in err["message"]
    assert sorted(p.name for p in bobs.iterdir()) == []
    assert list(outside.iterdir()) == []


@pytest.mark.slow
def test_a_workspace_naming_an_existing_file_is_400(rooted: Live) -> None:
    home = _home(rooted, "alice")
    with rooted.client("alice") as alice:
        new_session(alice, workspace="proj")
        (home / "notes").write_text("a file\n")
        (home / "proj" / "data").write_text("a file\n")
        for name, segment in (("notes", "notes"), ("notes/x", "notes"), ("proj/data", "data")):
            err = error(alice.post("/v1/sessions", json={"workspace": name}), 400, "invalid_value")
            assert f"{segment!r} on its way is not a directory" in err["message"]
            assert err["details"] == {"workspace": name}
        assert (home / "notes").read_text() == "a file\n"


@pytest.mark.slow
def test_a_workspace_of_the_earlier_layout_named_like_a_principal_stays_apart(
    rooted: Live,
) -> None:
    """Before, ``{"workspace": "alice"}`` from anyone bound ``<root>/alice``: it is not
    alice's directory now."""
    legacy = _root(rooted) / "alice"
    (legacy / "src").mkdir(parents=True)
    (legacy / "src" / "bobs.txt").write_text("bob's, from the earlier layout\n")
    with rooted.client("alice") as alice:
        src = Path(new_session(alice, workspace="src")["workspace"])
        assert src == _home(rooted, "alice") / "src"
        assert list(src.iterdir()) == []
    assert (legacy / "src" / "bobs.txt").exists()


@pytest.mark.slow
def test_an_admin_binds_an_explicit_directory(rooted: Live, tmp_path: Path) -> None:
    there = tmp_path / "elsewhere" / "project"
    there.mkdir(parents=True)
    (tmp_path / "a-file").write_text("x")
    with rooted.client("root") as admin:
        assert new_session(admin, workspace=str(there))["workspace"] == str(there.resolve())
        via = str(there / ".." / "project")
        assert new_session(admin, workspace=via)["workspace"] == str(there.resolve())
        for missing in (str(tmp_path / "nope"), str(tmp_path / "a-file")):
            answer = admin.post("/v1/sessions", json={"workspace": missing})
            err = error(answer, 400, "invalid_value")
            assert "is not an existing directory" in err["message"]
        assert not (tmp_path / "nope").exists()


def test_an_admin_binds_an_explicit_directory_without_a_workspace_root(
    live: Live, tmp_path: Path
) -> None:
    with live.client("root") as admin, live.client("alice") as alice:
        assert new_session(admin, workspace=str(tmp_path))["workspace"] == str(tmp_path.resolve())
        error(alice.post("/v1/sessions", json={"workspace": str(tmp_path)}), 403, "forbidden")
        err = error(alice.post("/v1/sessions", json={"workspace": "proj"}), 400, "invalid_value")
        assert "PLAIT_WORKSPACE_ROOT" in err["message"]


@pytest.mark.parametrize(
    "names",
    [
        ("alice", "Alice", "ALICE"),
        ("..", ".", "...", "_", "-", "~"),
        ("a/b", "a_b", "a b", "a%2Fb"),
        ("x" * 63, "x" * 64, "x" * 200),
        ("p", "p~", "P"),
        ("ünïcode", "unicode", "\ud800"),
    ],
)
def test_principal_names_never_share_or_escape_a_directory(names: tuple[str, ...]) -> None:
    dirs = [principal_directory(n) for n in names]
    assert len(set(dirs)) == len(dirs), dirs
    for d in dirs:
        assert d not in (".", "..") and "/" not in d and "\x00" not in d, d
        assert 0 < len(d) <= 80, d
        assert d.isascii(), d
        assert d.startswith("@"), d
    assert principal_directory("alice") == "@alice"
