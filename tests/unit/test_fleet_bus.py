"""The fleet bus (supervisor/fleet/bus.py) on a real PostgreSQL server (``-m postgres``): notices between two
buses, delivery at commit and never on rollback, reconnection after the LISTEN connection is killed (and the
notice sent meanwhile lost, as documented), and the payload limit."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import psycopg
import pytest

from supervisor.errors import StoreError
from supervisor.fleet.bus import NOTIFY_SQL, FleetBus, Notice

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

# the waits below end as soon as the notice arrives; the bound only turns a hang into a failure
_BOUND_S = 10.0


def payload(member: str, **fields: object) -> str:
    return json.dumps({"member": member, **fields})


class Heard:
    """What a bus's handler heard, in order, to wait on."""

    def __init__(self) -> None:
        self.notices: list[Notice] = []
        self._taken = 0
        self._arrived = anyio.Event()

    def __call__(self, notice: Notice) -> None:
        self.notices.append(notice)
        self._arrived.set()

    async def next(self) -> Notice:
        with anyio.fail_after(_BOUND_S):
            while self._taken >= len(self.notices):
                self._arrived = anyio.Event()
                await self._arrived.wait()
        self._taken += 1
        return self.notices[self._taken - 1]

    @property
    def unread(self) -> int:
        return len(self.notices) - self._taken


@asynccontextmanager
async def serving(bus: FleetBus) -> AsyncIterator[FleetBus]:
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(_BOUND_S):
            await tg.start(bus.serve)
        yield bus
        tg.cancel_scope.cancel()


async def test_a_notice_published_by_one_bus_reaches_the_others_handler_not_its_own(pg_dsn: str) -> None:
    heard_a, heard_b = Heard(), Heard()
    a = FleetBus(pg_dsn, member="member-a")
    b = FleetBus(pg_dsn, member="member-b")
    a.on("ss_throttle", heard_a)
    b.on("ss_throttle", heard_b)
    async with serving(a), serving(b):
        await a.publish("ss_throttle", payload("member-a", endpoint="genesys:api", n=1))
        await b.publish("ss_throttle", payload("member-b", n=2))
        got = await heard_b.next()
        assert got.channel == "ss_throttle"
        assert json.loads(got.payload) == {"member": "member-a", "endpoint": "genesys:api", "n": 1}
        assert got.sender_pid > 0
        # a hears b's, never its own (sent first, so it would have come first)
        assert json.loads((await heard_a.next()).payload)["n"] == 2
        assert a.own_dropped == 1 and b.own_dropped == 1


async def test_only_registered_channels_are_heard(pg_dsn: str) -> None:
    heard = Heard()
    b = FleetBus(pg_dsn, member="member-b")
    b.on("ss_circuit", heard)
    publisher = FleetBus(pg_dsn, member="member-a")
    async with serving(b):
        await publisher.publish("ss_throttle", payload("member-a", n=1))
        await publisher.publish("ss_circuit", payload("member-a", n=2))
        assert json.loads((await heard.next()).payload)["n"] == 2
    await publisher.aclose()


async def test_a_notice_sent_in_a_transaction_arrives_at_its_commit_and_never_on_rollback(
    pg_dsn: str,
) -> None:
    heard = Heard()
    b = FleetBus(pg_dsn, member="member-b")
    b.on("ss_desired", heard)
    marker = FleetBus(pg_dsn, member="member-a")
    async with serving(b), await psycopg.AsyncConnection.connect(pg_dsn) as writer:
        # inside an open transaction: not delivered while it is open
        await writer.execute(NOTIFY_SQL, ("ss_desired", payload("member-a", step="committed")))
        # a notice committed meanwhile comes through alone: the open transaction's is not there yet
        await marker.publish("ss_desired", payload("member-a", step="marker-1"))
        assert json.loads((await heard.next()).payload)["step"] == "marker-1"
        await writer.commit()
        assert json.loads((await heard.next()).payload)["step"] == "committed"

        await writer.execute(NOTIFY_SQL, ("ss_desired", payload("member-a", step="rolled-back")))
        await writer.rollback()
        await marker.publish("ss_desired", payload("member-a", step="marker-2"))
        # notices come in commit order: a rolled-back one delivered at all would come before this
        assert json.loads((await heard.next()).payload)["step"] == "marker-2"
        assert heard.unread == 0
    await marker.aclose()


async def test_the_bus_listens_again_after_its_connection_is_killed_and_what_was_sent_meanwhile_is_lost(
    pg_dsn: str,
) -> None:
    heard = Heard()
    down = anyio.Event()
    release = anyio.Event()
    waits: list[float] = []

    async def gated_sleep(seconds: float) -> None:
        # the bus's wait before reconnecting: held until the test has published while it is down
        waits.append(seconds)
        down.set()
        await release.wait()

    relistened = anyio.Event()

    def listening(reconnected: bool) -> None:
        if reconnected:
            relistened.set()

    b = FleetBus(pg_dsn, member="member-b", sleep=gated_sleep)
    b.on("ss_circuit", heard)
    b.on_listening(listening)
    a = FleetBus(pg_dsn, member="member-a")
    async with serving(b), await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin:
        killed = b.listener_pid
        assert killed is not None
        cur = await admin.execute("SELECT pg_terminate_backend(%s)", (killed,))
        assert (await cur.fetchone()) == (True,)
        with anyio.fail_after(_BOUND_S):
            await down.wait()
        assert b.degraded is not None and b.listener_pid is None
        await a.publish("ss_circuit", payload("member-a", step="while-down"))
        release.set()
        with anyio.fail_after(_BOUND_S):
            await relistened.wait()
        assert b.degraded is None and b.listener_pid not in (None, killed)
        await a.publish("ss_circuit", payload("member-a", step="after"))
        assert json.loads((await heard.next()).payload)["step"] == "after"
        assert heard.unread == 0
        assert waits == [0.1]
    await a.aclose()


async def test_a_payload_of_8000_bytes_or_more_is_refused_before_it_is_sent(pg_dsn: str) -> None:
    heard = Heard()
    b = FleetBus(pg_dsn, member="member-b")
    b.on("ss_attributes", heard)
    a = FleetBus(pg_dsn, member="member-a")
    async with serving(b):
        with pytest.raises(
            ValueError, match=r"'ss_attributes' is 8000 bytes; PostgreSQL carries fewer than 8000"
        ):
            await a.publish("ss_attributes", "x" * 8000)
        # multi-byte text counts in bytes: 4000 two-byte characters are 8000 bytes
        with pytest.raises(ValueError, match="8000 bytes"):
            await a.publish("ss_attributes", "é" * 4000)
        # the limit is PostgreSQL's own: 7999 bytes go through, 8000 the server refuses too
        await a.publish("ss_attributes", "y" * 7999)
        assert (await heard.next()).payload == "y" * 7999
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as raw:
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="payload string too long"):
                await raw.execute(NOTIFY_SQL, ("ss_attributes", "x" * 8000))
    await a.aclose()


@pytest.mark.parametrize(
    ("use", "message"),
    [
        (lambda bus: bus.on("throttle", lambda n: None), "does not start with 'ss_'"),
        (lambda bus: bus.on("ss_" + "x" * 61, lambda n: None), "longer than 63 bytes"),
    ],
)
def test_a_channel_outside_the_fleets_is_refused(use: Callable[[FleetBus], None], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        use(FleetBus("host=/nowhere", member="m"))


async def test_publishing_to_an_unreachable_database_names_it_never_the_password(tmp_path: object) -> None:
    bus = FleetBus(f"host={tmp_path} dbname=fleet user=u connect_timeout=2", member="m", password="s3cr3t-pw")
    with pytest.raises(StoreError) as caught:
        await bus.publish("ss_throttle", payload("m"))
    assert "fleet bus" in str(caught.value) and "cannot reach the database" in str(caught.value)
    assert "s3cr3t-pw" not in str(caught.value)
