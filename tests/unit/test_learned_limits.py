"""The pacers' learned limits in the store's ``meta`` table (supervisor/runtime/learned_limits.py), on a
real SQLite file: kept and read back, aged out, a bad row ignored with one warning naming its key."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from supervisor.runtime import learned_limits
from supervisor.store import SqliteStore
from supervisor.vocabulary import CXONE_AGENT_SESSIONS, GENESYS_WEBMESSAGING

pytestmark = pytest.mark.anyio

NOW = 1_796_194_800.0
HOUR = 3600.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await SqliteStore.open(tmp_path / "store.sqlite3", synchronous="normal")
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_kept_limits_are_read_back_while_fresh_and_one_row_per_endpoint(
    store: SqliteStore, tmp_path: Path
) -> None:
    await learned_limits.save(store, {GENESYS_WEBMESSAGING: 200.0, CXONE_AGENT_SESSIONS: 35.5}, NOW)
    await learned_limits.save(store, {GENESYS_WEBMESSAGING: 180.0}, NOW + 10.0)  # a later cut replaces it
    assert await learned_limits.load(store, NOW + 20.0, HOUR, None) == {
        GENESYS_WEBMESSAGING: 180.0,
        CXONE_AGENT_SESSIONS: 35.5,
    }
    # older than the bound: not used; a bound of 0: never
    assert await learned_limits.load(store, NOW + 5.0 + HOUR, HOUR, None) == {GENESYS_WEBMESSAGING: 180.0}
    assert await learned_limits.load(store, NOW + 20.0, 0.0, None) == {}
    # the rows as docs/store.md says, beside the owner epoch (which nobody else writes)
    conn = sqlite3.connect(tmp_path / "store.sqlite3")
    rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    conn.close()
    assert json.loads(rows["pacer.genesys:webmessaging"]) == {"limit": 180.0, "at": NOW + 10.0}
    assert set(rows) == {"epoch", "pacer.genesys:webmessaging", "pacer.cxone:agent-sessions"}
    with pytest.raises(ValueError, match="epoch"):
        await store.write_meta({"epoch": "99"})


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("pacer.genesys:webmessaging", "nonsense", "not {"),
        ("pacer.genesys:webmessaging", '{"limit": -5, "at": 1796194800}', "finite rate > 0"),
        ("pacer.genesys:webmessaging", '{"limit": 200}', "not {"),
        ("pacer.mars:webmessaging", '{"limit": 200, "at": 1796194800}', "pacer.<platform>:<endpoint>"),
        ("pacer.genesys", '{"limit": 200, "at": 1796194800}', "pacer.<platform>:<endpoint>"),
    ],
)
async def test_a_bad_row_is_ignored_with_one_warning_naming_its_key(
    store: SqliteStore, key: str, value: str, problem: str
) -> None:
    await learned_limits.save(store, {CXONE_AGENT_SESSIONS: 35.0}, NOW)
    await store.write_meta({key: value})
    warnings: list[str] = []
    assert await learned_limits.load(store, NOW, HOUR, warnings.append) == {CXONE_AGENT_SESSIONS: 35.0}
    (line,) = warnings
    assert repr(key) in line and problem in line and "\n" not in line and "ignored" in line
