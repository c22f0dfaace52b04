"""docs/store.md's stricter role, run as written on a real PostgreSQL (``-m postgres``): the daemons' role
has the rows of the store's tables and nothing else; the owner makes and migrates the tables."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from supervisor.errors import StoreError
from supervisor.store import ServerSession, ServerState, Submission
from supervisor.store.pg import PgStore
from supervisor.store.pg_schema import prepare
from supervisor.store.schema import SCHEMA_VERSION
from tests.harness.postgres import PostgresServer, url_of

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

DOC = Path(__file__).resolve().parents[2] / "docs" / "store.md"


def documented_block() -> str:
    """The ``sql`` block after "Stricter: the daemons' role has rows, not tables"."""
    text = DOC.read_text(encoding="utf-8")
    after = text[text.index("**Stricter: the daemons' role has rows, not tables.**") :]
    match = re.search(r"```sql\n(.*?)```", after, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.fixture
def roles(pg_server: PostgresServer) -> Iterator[tuple[str, str]]:
    """The block run by an administrator, its names made unique (roles are the whole server's): the
    owner's DSN (in the schema) and the daemons' DSN (its role's own search_path); the embedded server
    trusts its socket, so the passwords are unused."""
    suffix = secrets.token_hex(4)
    owner, daemon = f"ss_owner_{suffix}", f"ss_daemon_{suffix}"
    block = re.sub(r"\bsupervisor_owner\b", owner, documented_block())
    block = re.sub(r"\bsupervisor\b", daemon, block)  # the daemons' role and the schema share the name
    with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
        for statement in block.split(";"):
            lines = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
            if "\n".join(lines).strip():
                admin.execute("\n".join(lines).encode())
    try:
        yield (
            make_conninfo(pg_server.dsn, user=owner, options=f"-c search_path={daemon}"),
            make_conninfo(pg_server.dsn, user=daemon, options=""),
        )
    finally:
        with psycopg.connect(pg_server.dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {daemon} CASCADE".encode())
            for role in (daemon, owner):
                admin.execute(f"DROP OWNED BY {role}".encode())
                admin.execute(f"DROP ROLE {role}".encode())


async def test_the_daemons_role_uses_the_rows_and_may_change_no_table(roles: tuple[str, str]) -> None:
    owner, daemon = roles
    await (await PgStore.open(url_of(owner))).aclose()  # the owner makes the tables
    store = await PgStore.open(url_of(daemon))
    try:
        await store.session_opening(
            ServerSession("wm-1", "genesys", "webmessaging", ServerState.OPENING, 1.0, guest_token="t")
        )
        await store.submit(Submission("u1", "genesys:c", "wm-1", "c1", {"a": "1"}, frozenset(), 2.0), 10)
        claimed = await store.claim(
            "c1", {}, idempotency_key="k", participant_id="p", endpoint="PATCH x", sent_at=3.0, limit=5
        )
        # rows into identity columns (outbox.id, ledger.request_id): no grant on their sequences needed
        assert claimed is not None and claimed.entry is not None and claimed.entry.request_id == 1
    finally:
        await store.aclose()
    async with await psycopg.AsyncConnection.connect(daemon, autocommit=True) as conn:
        cur = await conn.execute(
            b"SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user"
        )
        assert await cur.fetchone() == (False, False, False)
        for refused in (
            "CREATE TABLE extra (a int)",
            "ALTER TABLE outbox ADD COLUMN extra int",
            "DROP TABLE mismatches",
            "TRUNCATE outbox",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(refused.encode())


async def test_a_migration_waits_for_the_owner(roles: tuple[str, str]) -> None:
    owner, daemon = roles
    async with await psycopg.AsyncConnection.connect(owner, autocommit=True) as conn:
        await prepare(conn, upto=SCHEMA_VERSION - 1)  # an older release's store
    # migration 6 makes tables: the daemons' role may not, and says so in one line, having written nothing
    with pytest.raises(StoreError, match=r"the role may not do this \(permission denied for schema"):
        await PgStore.open(url_of(daemon))
    # the owner opens it once with this release; then the daemons' role does
    await (await PgStore.open(url_of(owner))).aclose()
    await (await PgStore.open(url_of(daemon))).aclose()
