"""Admission across a fleet (supervisor/fleet/admission.py): two daemons in process on one PostgreSQL schema,
each a member with shards of its own, against the Genesys simulator (``-m postgres``). A Retry-After one member
is told holds the endpoint on the other (read from the simulator's activity log), a circuit opened on one is
open on the other, and each paces at its share of the configured rate."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any

import anyio
import httpx
import psycopg
import pytest

from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.store.shards import SHARDS, shard_of
from supervisor.vocabulary import GENESYS_WEBMESSAGING, CircuitState
from tests.harness.activity import ActivityTail
from tests.harness.config import daemon_config, genesys_config, with_daemon
from tests.harness.in_process import Harness, supervised
from tests.harness.postgres import url_of
from tests.harness.process import running_daemon
from tests.harness.shard_leases import ShardLeases

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.postgres]

RETRY_AFTER_S = 2


def member_config(sim: GenesysSimulator, url: str, member: str, prefix: str, **overrides: object) -> str:
    """One Web Messaging session ``<prefix>wm-0`` on ``url``'s store, stamped ``member``."""
    text = genesys_config(sim.urls, 1, **overrides).replace('id = "wm-', f'id = "{prefix}wm-')
    return with_daemon(text, stampMember=member) + f'[store]\nurl = "{url}"\n'


def split(first: str, second: str) -> tuple[set[int], set[int]]:
    """Two halves of the shards, the first session's in the first, the second's in the second."""
    a, b = shard_of(first), shard_of(second)
    assert a != b
    half = {s for s in range(SHARDS) if s % 2 == a % 2} - {b}
    return half | {a}, set(range(SHARDS)) - half - {a}


def held_for(h: Harness) -> float:
    return h.supervisor.wiring.attempts.connect(GENESYS_WEBMESSAGING).held_for()


async def test_a_retry_after_told_to_one_member_holds_the_endpoint_on_the_other(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str
) -> None:
    """Faults through the simulator's admin API, the check from its activity log over HTTP (as a check of
    several daemons reads it): b sends nothing to the endpoint before the Retry-After a was told ends."""
    shards_a, shards_b = split("wm-0", "b-wm-0")
    leases_a, leases_b = ShardLeases("member-a", shards_a), ShardLeases("member-b", shards_b)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    config_a = member_config(genesys_sim, pg_url, "m1", "")
    config_b = member_config(genesys_sim, pg_url, "m2", "b-")
    admin = genesys_sim.urls["admin"]
    async with httpx.AsyncClient() as http:
        refusal = {
            "kind": "admission_limit",
            "count": 1,
            "params": {"rate_per_s": 0, "status": 429, "retry_after": str(RETRY_AFTER_S)},
        }
        async with supervised(config_b, tmp_path / "b", durable=True, leases=leases_b, fleet=True) as b:
            await b.wait_active(1)
            (await http.post(admin + "/faults", json=refusal)).raise_for_status()
            async with supervised(config_a, tmp_path / "a", durable=True, leases=leases_a, fleet=True) as a:
                assert a.fleet is not None and b.fleet is not None
                # a's first handshake is refused: its Retry-After reaches b over the bus
                await b.wait(lambda: b.fleet is not None and b.fleet.admission.applied >= 1)
                assert held_for(b) > RETRY_AFTER_S - 1.0
                assert a.fleet.admission.published >= 1 and a.fleet.admission.applied == 0
                # b's connection is dropped now: its reconnection must wait for the Retry-After
                (await http.post(admin + "/faults", json={"kind": "drop"})).raise_for_status()
                await a.wait_active(1, limit_s=RETRY_AFTER_S + 10.0)
                await b.wait(
                    lambda: len(_connects(genesys_sim, "m2")) >= 2 and b.all_in("active"),
                    RETRY_AFTER_S + 10.0,
                )
        tail = ActivityTail(admin, http)
        await tail.read()
    assert tail.complete()
    connects = [e for e in tail.entries if e["listener"] == "webmessaging" and e["kind"] == "connect"]
    refused = [e for e in connects if e["member"] == "m1" and e["status"] == 429]
    assert len(refused) == 1
    ends = refused[0]["t"] + RETRY_AFTER_S
    after = [e for e in connects if e["member"] == "m2" and e["t"] > refused[0]["t"]]
    assert after, "b never reconnected"
    # nothing of b's reached the endpoint before the Retry-After a was told ended
    assert min(e["t"] for e in after) >= ends - 0.05


def _connects(sim: GenesysSimulator, member: str) -> list[dict[str, Any]]:
    return [
        e
        for e in sim.activity.since(0).entries
        if e["listener"] == "webmessaging" and e["kind"] == "connect" and e["member"] == member
    ]


async def test_a_circuit_opened_on_one_member_is_open_on_the_other_and_not_sent_back(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str
) -> None:
    shards_a, shards_b = split("wm-0", "b-wm-0")
    leases_a, leases_b = ShardLeases("member-a", shards_a), ShardLeases("member-b", shards_b)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # a's circuit opens at its first failure, for 30 s: a 503 without Retry-After is a failing back
    # end (not a throttle), which the circuit counts
    config_a = member_config(genesys_sim, pg_url, "m1", "", open_for=30.0).replace(
        "[circuit]\n", "[circuit]\nfailureThreshold = 1\n", 1
    )
    config_b = member_config(genesys_sim, pg_url, "m2", "b-")
    async with supervised(config_b, tmp_path / "b", durable=True, leases=leases_b, fleet=True) as b:
        await b.wait_active(1)
        genesys_sim.faults.inject(
            Fault(
                kind=FaultKind.ADMISSION_LIMIT,
                count=1,
                params={"rate_per_s": 0, "status": 503, "retry_after": None},
            )
        )
        async with supervised(config_a, tmp_path / "a", durable=True, leases=leases_a, fleet=True) as a:
            assert a.fleet is not None and b.fleet is not None
            await b.wait(lambda: b.fleet is not None and b.fleet.admission.applied >= 1)
            gate_b = b.supervisor.wiring.attempts.connect(GENESYS_WEBMESSAGING)
            assert gate_b.circuit_state is CircuitState.OPEN
            opened = b.recorded.named("CIRCUIT_BREAKER_OPEN")
            assert [(e["circuitId"], e["reason"]) for e in opened] == [
                (GENESYS_WEBMESSAGING.circuit_id, "FLEET")
            ]
            assert opened[0]["openS"] > 25.0
            # a's own opening went out once (its count moves when the NOTIFY's answer is read, which
            # may come after b heard it); b's opening (a peer's) is not sent back to a
            await a.wait(lambda: a.fleet is not None and a.fleet.admission.published >= 1)
            assert a.fleet.admission.published == 1 and b.fleet.admission.published == 0
            assert a.fleet.admission.applied == 0


async def test_each_member_paces_at_its_share_of_the_configured_rate(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str
) -> None:
    """20 connection attempts a second configured: a member with 64 of the 256 shards starts its
    endpoints at 5 a second, and at 10 once it owns 128 (its leases moved)."""
    mine = shard_of("wm-0")
    quarter = {mine} | {s for s in range(SHARDS) if s != mine and s % 4 == 0}
    quarter = set(sorted(quarter)[:64])
    assert mine in quarter and len(quarter) == 64
    leases = ShardLeases("member-a", quarter)
    config = member_config(genesys_sim, pg_url, "m1", "")
    async with supervised(config, tmp_path, durable=True, leases=leases, fleet=True) as a:
        endpoints = a.supervisor.wiring.attempts.endpoints
        assert endpoints.share == 64 / 256
        fresh = endpoints.connect(GENESYS_WEBMESSAGING.of("fresh"))
        assert fresh.rate == pytest.approx(20.0 * 64 / 256)
        more = set(sorted(set(range(SHARDS)) - quarter)[:64])
        await leases.give(more)
        assert endpoints.share == 128 / 256
        assert endpoints.connect(GENESYS_WEBMESSAGING.of("later")).rate == pytest.approx(10.0)


async def test_the_hard_tenant_quota_spaces_the_attempts_of_every_member_together(
    genesys_sim: GenesysSimulator, tmp_path: Path, pg_url: str
) -> None:
    """``tenantQuota = 2``, burst 1: one attempt every 0.5 s for the tenant, whichever member makes it
    (the pace alone would send them 50 ms apart). Two members with two sessions each: their four
    handshakes reach the platform 0.5 s apart."""
    first, second = ("wm-0", "wm-1"), ("b-wm-0", "b-wm-1")
    # each member half the shards (its pace: half the configured 20 a second), its sessions' among them
    shards_b = {shard_of(s) for s in second}
    shards_a = ({shard_of(s) for s in first} | set(range(0, SHARDS, 2))) - shards_b
    shards_b = set(range(SHARDS)) - shards_a
    assert {shard_of(s) for s in first} <= shards_a and {shard_of(s) for s in second} <= shards_b
    leases_a, leases_b = ShardLeases("member-a", shards_a), ShardLeases("member-b", shards_b)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    quota = "[admission]\ntenantQuota = 2\ntenantQuotaBurst = 1\n"

    def config(member: str, prefix: str) -> str:
        text = genesys_config(genesys_sim.urls, 2).replace('id = "wm-', f'id = "{prefix}wm-')
        text = text.replace("[admission]\n", quota, 1)
        return with_daemon(text, stampMember=member) + f'[store]\nurl = "{pg_url}"\n'

    async with (
        supervised(
            config("m1", ""), tmp_path / "a", durable=True, leases=leases_a, fleet=True, drain_s=None
        ) as a,
        supervised(
            config("m2", "b-"), tmp_path / "b", durable=True, leases=leases_b, fleet=True, drain_s=None
        ) as b,
    ):
        await a.wait_active(2, limit_s=20.0)
        await b.wait_active(2, limit_s=20.0)
        assert a.fleet is not None and a.fleet.quota is not None and a.fleet.quota.decisions >= 2
    times = sorted(float(e["t"]) for m in ("m1", "m2") for e in _connects(genesys_sim, m))
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.5 - 0.05, gaps


async def test_a_daemon_run_on_a_postgresql_store_listens_on_the_fleet_bus(
    genesys_sim: GenesysSimulator, pg_dsn: str
) -> None:
    """``session-supervisor run`` as a service runs it (supervisor/runtime/assembly.py): on a PostgreSQL
    store it LISTENs on ss_throttle and ss_circuit, from its own connection, until it stops."""
    with tempfile.TemporaryDirectory(prefix="ss-fa-", dir="/tmp") as directory:
        store = f'[store]\nurl = "{url_of(pg_dsn)}"\n'
        config = daemon_config(genesys_sim.urls, Path(directory), [("wm-0", None)], extra=store)
        async with (
            await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as admin,
            running_daemon(config) as daemon,
        ):
            await daemon.wait_ready(1)
            with anyio.fail_after(10.0):
                while True:
                    listening = await _listening(admin)
                    if listening:
                        break
                    await anyio.sleep(0.05)  # polling the server's view, not waiting for a timer
            # its LISTEN connection, the store's application name; the last of its LISTENs (sorted)
            assert listening == [("session-supervisor", 'LISTEN "ss_throttle"')]
            assert await daemon.stop() == 0
            with anyio.fail_after(10.0):
                while True:
                    if not await _listening(admin):
                        break
                    await anyio.sleep(0.05)  # polling the server's view, not waiting for a timer


async def _listening(admin: psycopg.AsyncConnection[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """(application, last statement) of the backends of this database whose last statement was a LISTEN
    (``pg_listening_channels()`` answers for its own session only)."""
    cur = await admin.execute(
        "SELECT application_name, query FROM pg_stat_activity "
        "WHERE datname = current_database() AND query LIKE 'LISTEN %'"
    )
    return [(str(a), str(q)) for a, q in await cur.fetchall()]
