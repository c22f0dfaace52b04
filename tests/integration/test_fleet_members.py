"""Two fleet members in process on one PostgreSQL schema against the Genesys simulator (``-m postgres``):
they split the shards balanced, each session runs on exactly one of them, and a member killed (as a
kill -9 leaves things: nothing more written to the store, its tasks gone without a drain, its leases
left to expire) has its shards taken over by the other after the TTL, its guests resumed with their
kept tokens (no new guest session)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import anyio
import psycopg
import pytest
from anyio.abc import TaskStatus

from supervisor.config import parse_config
from supervisor.fleet.leases import PgLeases
from supervisor.fleet.member import fleet_leases
from supervisor.runtime.leases import Lease, LeaseHolder
from supervisor.sim.genesys import GenesysSimulator
from supervisor.store.shards import shard_of
from tests.harness.config import daemon_config, genesys_config
from tests.harness.in_process import Harness, supervised
from tests.harness.process import running_daemon
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.postgres]

SESSIONS = 8


def member_config(sim: GenesysSimulator, url: str, member: str) -> str:
    # a short lease, so a kill is taken over in seconds: 2 s (a 1.2 s local window), renewed every 0.5 s
    return genesys_config(sim.urls, SESSIONS) + (
        f'[store]\nurl = "{url}"\npasswordFile = "pg-password"\n'
        f'[fleet]\nmember = "{member}"\nhost = "{member}.example"\nleaseSeconds = 2\nrenewSeconds = 0.5\n'
    )


def member(sim: GenesysSimulator, url: str, directory: Path, name: str) -> tuple[str, PgLeases]:
    directory.mkdir()
    (directory / "pg-password").write_text("not-used-by-a-trust-server\n")
    text = member_config(sim, url, name)
    parsed = parse_config(text, f"{name}.toml")
    from supervisor.bus import EventBus
    from supervisor.clock import SystemClock

    leases = fleet_leases(
        parsed, config_path=None, config_dir=directory, environ={}, bus=EventBus(), clock=SystemClock()
    )
    return text, leases


class Killable:
    """A member's leases whose task the test can end as a kill would: no renewal, no release, no loss
    told (the process is gone); the rest of the Leases interface is the member's."""

    def __init__(self, leases: PgLeases) -> None:
        self.leases = leases
        self._scope: anyio.CancelScope | None = None

    @property
    def identity(self) -> str:
        return self.leases.identity

    def owned(self) -> Mapping[int, Lease]:
        return self.leases.owned()

    def subscribe_deadlines(self, callback: Callable[[Mapping[int, Lease]], None]) -> None:
        self.leases.subscribe_deadlines(callback)

    async def serve(
        self, holder: LeaseHolder, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with anyio.CancelScope() as self._scope:
            await self.leases.serve(holder, task_status=task_status)
        await anyio.sleep_forever()

    def kill(self) -> None:
        assert self._scope is not None
        self._scope.cancel()


def active_here(h: Harness, leases: PgLeases | Killable) -> set[str]:
    """The sessions active on this member (every one in a shard it holds)."""
    return {
        sid
        for sid, runner in h.runners.items()
        if runner.state.value == "active" and not runner.core.terminated and shard_of(sid) in leases.owned()
    }


async def test_two_members_split_the_shards_and_one_killed_is_taken_over_after_the_ttl(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str
) -> None:
    ids = {f"wm-{i}" for i in range(SESSIONS)}
    b_text, b = member(genesys_sim, pg_url, tmp_path / "b", "b")
    a_text, a = member(genesys_sim, pg_url, tmp_path / "a", "a")
    assert a.digest == b.digest  # the same sessions and tenants: one fleet
    try:
        async with supervised(b_text, tmp_path / "b", durable=True, leases=b) as hb:
            await hb.wait_active(SESSIONS)  # alone: every shard, every session
            assert len(b.owned()) == 256
            conversations = len(genesys_sim.state.conversations)
            killable = Killable(a)
            async with supervised(a_text, tmp_path / "a", durable=True, leases=killable, drain_s=None) as ha:
                # b gives back a few shards per renewal, a takes them: balanced, disjoint
                await wait_until(lambda: len(a.owned()) == 128 and len(b.owned()) == 128, 30.0)
                assert not a.owned().keys() & b.owned().keys()
                # each session on exactly the member that holds its shard
                await wait_until(lambda: active_here(ha, a) | active_here(hb, b) == ids, 20.0)
                on_a, on_b = active_here(ha, a), active_here(hb, b)
                assert not on_a & on_b
                assert on_a == {sid for sid in ids if shard_of(sid) in a.owned()}
                tokens = {sid: ha.runners[sid].transport.guest_token for sid in on_a}
                # the shards b gave back were taken over, not started anew: every guest a runs
                # resumed the token b had kept, on the same conversation
                assert len(genesys_sim.state.conversations) == conversations
                # a is killed: nothing more written (its store closed), its lease task gone (no
                # renewal, no release), its connections dropped without a word to the platform (no
                # closeSession: what the kernel does to a killed process's sockets)
                assert ha.durable is not None and ha.durable.store is not None
                await ha.durable.store.aclose()
                killable.kill()
                await a.aclose()
                for runner in list(ha.runners.values()):
                    runner.hand_over()
            # b takes a's shards once their leases expire (2 s) at one of its renewals
            await wait_until(lambda: len(b.owned()) == 256, 10.0)
            await wait_until(lambda: active_here(hb, b) == ids, 20.0)
            # the guests were resumed with their kept tokens: no new guest session, no new conversation
            assert {sid: hb.runners[sid].transport.guest_token for sid in on_a} == tokens
            assert len(genesys_sim.state.conversations) == conversations
    finally:
        await a.aclose()
        await b.aclose()


async def test_run_on_a_postgresql_store_is_a_fleet_member_and_a_sigterm_frees_its_shards(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str, pg_dsn: str
) -> None:
    """``run`` with ``[store] url``: the member's row and every shard leased in its name while it runs;
    SIGTERM hands the sessions over (the drain), then frees every shard in one statement for the peers
    and marks the member leaving."""
    extra = (
        f'[store]\nurl = "{pg_url}"\npasswordFile = "pg-password"\n'
        '[fleet]\nmember = "edge-1"\nhost = "edge-1.example"\nleaseSeconds = 2\nrenewSeconds = 0.5\n'
    )
    config = daemon_config(genesys_sim.urls, tmp_path, [("wm-0", None), ("wm-1", None)], extra=extra)
    (tmp_path / "pg-password").write_text("not-used-by-a-trust-server\n")
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as raw:
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(2)
            cur = await raw.execute("SELECT member, host, state FROM fleet_members")
            assert await cur.fetchall() == [("edge-1", "edge-1.example", "active")]
            cur = await raw.execute("SELECT owner, count(*) FROM shard_leases GROUP BY owner")
            assert await cur.fetchall() == [("edge-1", 256)]
            assert await daemon.stop() == 0
        cur = await raw.execute(
            "SELECT owner, expires_at, count(*) FROM shard_leases GROUP BY owner, expires_at"
        )
        assert await cur.fetchall() == [(None, None, 256)]
        cur = await raw.execute("SELECT state FROM fleet_members WHERE member = 'edge-1'")
        assert await cur.fetchone() == ("leaving",)
        # handed over first: each guest left open for the next owner to resume
        cur = await raw.execute(
            "SELECT session_id, state, left_at IS NOT NULL FROM server_sessions ORDER BY 1"
        )
        assert await cur.fetchall() == [("wm-0", "open", True), ("wm-1", "open", True)]
    assert {e["sessionId"] for e in daemon.named("SESSION_HANDED_OVER")} == {"wm-0", "wm-1"}
