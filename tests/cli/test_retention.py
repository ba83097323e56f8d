"""``plait retention expire``: the documented command and setting, its dry run and JSON
report, expired entries in ``plait history``, and every bad input."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from plait.adapters.stores import open_store
from tests.cli.conftest import MESSAGE_FIELDS, Plait, assert_utc, check_message
from tests.contract.retention_contract import fork, history, seed, summary_of


@pytest.fixture(autouse=True)
def _no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def seeded(db_url: str) -> None:
    """s1: six messages 40+ days old, m1..m4 summarized; b1 forked at m4 with its own
    summary of them."""

    async def go() -> None:
        store = open_store(db_url)
        try:
            await seed(store)
            await fork(store, "s1", "b1", 4)
            await store.activate_summary(summary_of("b1", 4, history()), expected_generation=0)
        finally:
            await store.close()

    asyncio.run(go())


def test_dry_run_then_expire_and_history_shows_expired_entries(plait: Plait, db_url: str) -> None:
    seeded(db_url)
    before = plait.json("history", "s1")
    dry = plait.json("retention", "expire", "--older-than", "30", "--dry-run")
    assert dry["dry_run"] is True and dry["mode"] == "expire" and dry["archive_id"] is None
    assert [(x["session_id"], x["seq"], x["message_id"], x["held_by"]) for x in dry["expired"]] == [
        ("s1", 1, "m1", ["s1", "b1"]),
        ("s1", 2, "m2", ["s1", "b1"]),
        ("s1", 3, "m3", ["s1", "b1"]),
        ("s1", 4, "m4", ["s1", "b1"]),
    ]
    assert dry["held_back"] == [
        {"reason": "not covered by an active summary of session s1", "messages": 2}
    ]
    assert_utc(dry["cutoff"])
    assert plait.json("history", "s1") == before  # a dry run changes nothing

    done = plait.json("retention", "expire", "--older-than", "30")
    assert done["dry_run"] is False and done["expired"] == dry["expired"]
    for sid in ("s1", "b1"):
        messages = plait.json("history", sid)["messages"]
        for m in messages[:4]:
            assert set(m) == MESSAGE_FIELDS[m["kind"]] | {"expired"}
            assert set(m["expired"]) == {"expired_at", "policy", "mode", "digest", "archive_id"}
            assert m["expired"]["policy"] == "raw_history_days=30"
            assert m["expired"]["mode"] == "expire" and m["expired"]["digest"].startswith("sha256:")
            assert_utc(m["expired"]["expired_at"])
        for m in messages[4:]:
            check_message(m)  # untouched messages keep the documented shape
    text = plait.ok("history", "s1").out
    assert "[1] user: expired " in text and "by the retention policy raw_history_days=30" in text
    assert "[3] tool_result run_tests [c1]: expired" in text
    assert "fix the failing parser test" not in text and "go on" in text
    again = plait.ok("retention", "expire", "--older-than", "30").out
    assert again.startswith("expired 0 message(s)")


@pytest.mark.slow
def test_the_setting_gives_the_age_and_mode(plait: Plait, db_url: str, tmp_path: Path) -> None:
    seeded(db_url)
    (tmp_path / "plait.toml").write_text(
        '[retention]\nraw_history_days = 30\nmode = "archive"\n', encoding="utf-8"
    )
    report = plait.json("retention", "expire", "--session", "b1")
    assert report["mode"] == "archive" and report["policy"] == "raw_history_days=30"
    assert [x["message_id"] for x in report["expired"]] == ["m1", "m2", "m3", "m4"]
    archived = plait.json("artifacts", "show", report["archive_id"])
    assert "fix the failing parser test" in archived["text"]
    text = plait.ok("history", "s1").out
    assert f"archived in artifact {report['archive_id']}" in text

    dry = plait.json("retention", "restore", report["archive_id"], "--dry-run")
    assert [x["message_id"] for x in dry["restored"]] == ["m1", "m2", "m3", "m4"]
    assert plait.ok("history", "s1").out == text
    restored = plait.json("retention", "restore", report["archive_id"])
    assert restored["dry_run"] is False and restored["restored"] == dry["restored"]
    for sid in ("s1", "b1"):
        for m in plait.json("history", sid)["messages"]:
            check_message(m)  # no "expired" left
    assert "fix the failing parser test" in plait.ok("history", "b1").out
    again = plait.ok("retention", "restore", report["archive_id"]).out
    assert again.startswith("restored 0 message(s)") and "restored already?" in again
    missing = plait("retention", "restore", "art_nope")
    assert missing.code == 2 and "art_nope" in missing.err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--older-than", "-3"], "must be more than 0 days"),
        (["--older-than", "0"], "must be more than 0 days"),
        (["--older-than", "nan"], "must be more than 0 days"),
        (["--older-than", "soon"], "must be a number of days"),
        (["--older-than", "30", "--mode", "delete"], "invalid choice"),
        ([], "no retention age: pass --older-than DAYS or set [retention] raw_history_days"),
        (["--older-than", "30", "--session", "nope"], "nope"),
    ],
)
def test_bad_input_is_refused_and_nothing_changes(
    plait: Plait, db_url: str, argv: list[str], expected: str
) -> None:
    seeded(db_url)
    before = plait.json("history", "s1")
    result = plait("retention", "expire", *argv, "--json")
    assert result.code == 2, (result.out, result.err)
    assert expected in result.err and "error" in result.json
    assert plait.json("history", "s1") == before


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ("raw_history_days = -1", "raw_history_days must be more than 0 days"),
        ('raw_history_days = "30"', "raw_history_days must be a number of days"),
        ('mode = "shred"', "mode must be 'expire' or 'archive'"),
        ("keep = 3", "unknown key 'keep'"),
    ],
)
def test_a_bad_setting_names_the_table(
    plait: Plait, db_url: str, tmp_path: Path, table: str, expected: str
) -> None:
    seeded(db_url)
    (tmp_path / "plait.toml").write_text(f"[retention]\n{table}\n", encoding="utf-8")
    result = plait("retention", "expire", "--older-than", "30")
    assert result.code == 2
    assert "[retention]" in result.err and expected in result.err
