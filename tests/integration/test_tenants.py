"""Two Genesys tenants in one daemon: one tenant's outage with 429s never holds the other's sessions.

Two Genesys simulators over real loopback sockets, one per org (``[tenants.east]``, ``[tenants.west]``),
each with its own OAuth client; the socket API over real Unix sockets. East's platform drops every
socket and answers everything with 429 (and its REST API with 503): east's endpoints pause and its
circuits open, west's sessions stay active, its endpoints are never paused nor tripped, and west's
simulator never answered a 429 (docs/configuration.md, "Tenants").
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.attributes import Refused
from supervisor.clock import FakeClock
from supervisor.config import load_config
from supervisor.runtime.reload import Reloader, ReloadResult, answer
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import UpdateOutcome
from supervisor.vocabulary import Platform, TenantScope
from tests.harness.clocks import advancing
from tests.harness.config import Credentials, attributes_config, cxone_config, short_dir
from tests.harness.in_process import ApiSockets, Harness, supervised
from tests.harness.process import CLI
from tests.harness.simulators import StartCxone, StartGenesys
from tests.integration.api_harness import Conn, api_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

#: a store as the release of schema version 4 left it (tests/fixtures/store/write_release_store_v4.py)
V4_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "store" / "v4-byconv.sqlite3"
PER_TENANT = 2  # Web Messaging guests per tenant (and one notifications session each)


def tenant_table(
    name: str, urls: dict[str, str], *, secret: str = "genesys-secret", open_timeout: float = 2.0
) -> list[str]:
    return [
        f"[tenants.{name}]",
        'platform = "genesys"',
        f'loginUrl = "{urls["login"]}"',
        f'apiUrl = "{urls["api"]}"',
        f'webmessagingUrl = "{urls["webmessaging"]}"',
        f'streamingUrl = "{urls["streaming"]}"',
        f'clientId = "{name}-client"',
        f'clientSecretFile = "{secret}"',
        'deploymentId = "dep-1"',
        f"[tenants.{name}.keepalive]",
        "echoInterval = 0",
        "pingInterval = 5.0",
        "pingTimeout = 5.0",
        f"openTimeout = {open_timeout}",
    ]


def two_tenants(east: GenesysSimulator, west: GenesysSimulator) -> str:
    lines = [
        "[daemon]",
        "seed = 7",
        "shutdownGrace = 2.0",
        "[reconnect]",
        "firstDelayMin = 0.2",
        "firstDelayMax = 0.4",
        "[circuit]",
        "openFor = 30.0",
        "failureThreshold = 2",
        *tenant_table("east", dict(east.urls)),
        *tenant_table("west", dict(west.urls)),
    ]
    for tenant in ("east", "west"):
        for i in range(PER_TENANT):
            lines += [
                "[[sessions]]",
                f'id = "{tenant}-wm-{i}"',
                'platform = "genesys"',
                'kind = "webmessaging"',
                f'tenant = "{tenant}"',
            ]
        lines += [
            "[[sessions]]",
            f'id = "{tenant}-nt"',
            'platform = "genesys"',
            'kind = "notifications"',
            f'agentId = "{tenant}-agent"',
            f'tenant = "{tenant}"',
        ]
    return "\n".join(lines) + "\n"


def west_transitions(h: Harness) -> list[dict[str, Any]]:
    return [e for e in h.recorded.named("SESSION_TRANSITION") if e["machineId"].startswith("west")]


def tenant_of(endpoint: str) -> str | None:
    """``east/genesys:api`` -> east; ``genesys:api`` -> None (the default tenant's)."""
    return endpoint.split("/", 1)[0] if "/" in endpoint else None


async def test_one_tenants_outage_with_429s_never_holds_another_tenants_sessions(
    start_genesys: StartGenesys, tmp_path: Path
) -> None:
    east = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=3)
    west = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=4)
    async with api_daemon(two_tenants(east, west), tmp_path) as h:
        sessions = 2 * (PER_TENANT + 1)
        await h.wait_active(sessions)
        control = await Conn.open(h.control)

        async def call(method: str) -> dict[str, Any]:
            reply = await control.call(method)
            assert reply.error is None, reply
            return reply.parameters

        # the snapshot names each session's tenant
        rows = (await call(Method.LIST_SESSIONS))["sessions"]
        assert {row["sessionId"]: row.get("tenant") for row in rows} == {
            **{f"east-wm-{i}": "east" for i in range(PER_TENANT)},
            **{f"west-wm-{i}": "west" for i in range(PER_TENANT)},
            "east-nt": "east",
            "west-nt": "west",
        }
        # every session's connect endpoint is its tenant's own
        assert {row["sessionId"]: row["circuit"]["endpoint"] for row in rows} == {
            **{f"east-wm-{i}": "east/genesys:webmessaging" for i in range(PER_TENANT)},
            **{f"west-wm-{i}": "west/genesys:webmessaging" for i in range(PER_TENANT)},
            "east-nt": "east/genesys:streaming",
            "west-nt": "west/genesys:streaming",
        }
        west_changes_before = len(west_transitions(h))

        # east's platform goes down: every socket dropped, handshakes and calls answered 429, its API 503
        east.faults.inject(Fault(kind=FaultKind.DROP, count=PER_TENANT + 1))
        storm = east.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, params={"retry_after": "1"})).id
        east.faults.inject(Fault(kind=FaultKind.SERVER_ERROR_BURST, endpoint="* /api/*"))

        def east_tripped() -> bool:
            opened = h.recorded.named("CIRCUIT_BREAKER_OPEN")
            return any(tenant_of(e["circuitId"].removeprefix("circuit:")) == "east" for e in opened)

        await h.wait(east_tripped, limit_s=30.0)
        east_states = {
            r.context.session_id: r.state.value for r in h.runners.values() if r.context.tenant == "east"
        }
        assert all(state != "active" for state in east_states.values()), east_states

        # the socket API: east's circuits are its own (one open), west's all closed
        status = await call(Method.STATUS)
        circuits: dict[str, dict[str, Any]] = {c["endpoint"]: c for c in status["circuits"]}
        east_circuits = {e: c for e, c in circuits.items() if tenant_of(e) == "east"}
        west_circuits = {e: c for e, c in circuits.items() if tenant_of(e) == "west"}
        assert any(c["state"] == "open" for c in east_circuits.values()), east_circuits
        assert all(c["tenant"] == "east" for c in east_circuits.values())
        assert west_circuits and all(c["state"] == "closed" for c in west_circuits.values()), west_circuits
        assert not [e for e in circuits if tenant_of(e) is None]  # no default tenant: no bare endpoint

        # west: no pause, no circuit opening, every session active, never a state change since
        paced = h.recorded.named("PACING_CHANGED")
        assert any(tenant_of(p["endpoint"]) == "east" and p["reason"] == "throttled" for p in paced)
        assert not [p for p in paced if tenant_of(p["endpoint"]) == "west" and p["reason"] == "throttled"]
        assert not [
            e
            for e in h.recorded.named("CIRCUIT_BREAKER_OPEN")
            if tenant_of(e["circuitId"].removeprefix("circuit:")) == "west"
        ]
        west_rows = [r for r in (await call(Method.LIST_SESSIONS))["sessions"] if r.get("tenant") == "west"]
        assert {r["sessionId"]: r["state"] for r in west_rows} == {
            **{f"west-wm-{i}": "active" for i in range(PER_TENANT)},
            "west-nt": "active",
        }
        assert len(west_transitions(h)) == west_changes_before
        # the platforms' records: east refused guests with 429s (TooManyRequests); west never answered
        # one, nor a 5xx, and holds every one of its connections
        too_many = "TooManyRequestsErrorMessage"
        assert storm is not None and east.recorder.fault_hits(storm) > 0
        assert east.recorder.ws_messages(direction="out", kind=too_many) > 0
        assert west.recorder.ws_messages(direction="out", kind=too_many) == 0
        assert west.recorder.request_count(status=429) == 0
        assert west.recorder.request_count(status=503) == 0
        assert west.recorder.connections_open() == PER_TENANT + 1
        assert h.terminations() == {}
        await control.aclose()


async def ctl(control: Path, *args: str, stdin: bytes | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """``ctl`` as a script runs it: a subprocess; its exit code, its JSON lines, its stderr."""
    done = await anyio.run_process([*CLI, "ctl", "--socket", str(control), *args], input=stdin, check=False)
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr.decode()


async def together(
    *calls: Awaitable[tuple[int, list[dict[str, Any]], str]],
) -> list[tuple[int, list[dict[str, Any]], str]]:
    """Independent ``ctl`` runs at once (each a Python start-up: one after the other they cost seconds)."""
    out: list[tuple[int, list[dict[str, Any]], str] | None] = [None] * len(calls)

    async def run(i: int, call: Awaitable[tuple[int, list[dict[str, Any]], str]]) -> None:
        out[i] = await call

    async with anyio.create_task_group() as tg:
        for i, call in enumerate(calls):
            tg.start_soon(run, i, call)
    return [r for r in out if r is not None]


async def test_the_tenant_names_scripts_rely_on_from_the_command_line(
    start_genesys: StartGenesys, tmp_path: Path
) -> None:
    """``sessions[].tenant``, ``ctl sessions add --tenant`` and NDJSON ``tenant``, ``--tenant`` on ``ctl
    sessions|start|stop``, the rows' and ``Status`` circuits' ``tenant``, ``ctl attributes set
    --conversation ID --tenant T``: ``ctl`` run as a script runs it (subprocesses, exit codes, ``--json``)
    against a daemon with its store, the default tenant on one simulator and ``[tenants.west]`` on another."""
    home = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=5)
    west = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=6)
    west_conv = west.create_conversation()
    text = attributes_config(home.urls, ["conv-home"], store=tmp_path / "store.sqlite3")
    text += "\n".join(tenant_table("west", dict(west.urls))) + "\n"
    text += '[[sessions]]\nid = "west-0"\nplatform = "genesys"\nkind = "webmessaging"\ntenant = "west"\n'
    with short_dir() as sockets:
        paths = (sockets / "subscribe.sock", sockets / "control.sock")
        async with supervised(text, tmp_path, durable=True, sockets=ApiSockets(paths)) as h:
            await h.wait_active(2)
            control = paths[1]
            ndjson = b'{"id": "west-2", "kind": "webmessaging", "tenant": "west"}\n'
            ndjson += b'{"id": "x-1", "kind": "webmessaging", "tenant": "nope"}\n'
            flags, lines, status, written, listed = await together(
                ctl(
                    control,
                    "sessions",
                    "add",
                    "west-1",
                    "--kind",
                    "webmessaging",
                    "--tenant",
                    "west",
                    "--json",
                ),
                ctl(control, "sessions", "add", "--from", "-", "--json", stdin=ndjson),
                ctl(control, "status", "--json"),
                ctl(
                    control,
                    "attributes",
                    "set",
                    "--conversation",
                    west_conv.id,
                    "--tenant",
                    "west",
                    "k=v",
                    "--json",
                ),
                ctl(control, "sessions", "--tenant", "west", "--json"),
            )
            code, added, err = flags
            assert (code, [(a["sessionId"], a["added"]) for a in added]) == (0, [("west-1", True)]), err
            code, added, err = lines
            assert code == 1 and [(a["line"], a["added"]) for a in added] == [(1, True), (2, False)]
            assert err == (
                "session-supervisor: error: InvalidSessionSpec: "
                "AddSession: sessions[1].tenant: no tenant 'nope' ([tenants.nope])\n"
            )
            code, (answer,), _ = status
            circuits = {c["endpoint"]: c.get("tenant", "") for c in answer["circuits"]}
            assert code == 0 and circuits["west/genesys:webmessaging"] == "west"
            assert circuits["genesys:webmessaging"] == ""  # the default tenant's endpoint says no tenant
            code, (accepted,), err = written
            assert code == 0 and accepted["accepted"] is True, err
            # (listed while the adds run: west-0 and whichever added session is there yet, west's alone)
            code, (rows,), _ = listed
            tenants = {r["sessionId"]: (r["tenant"], r["state"]) for r in rows["sessions"]}
            assert code == 0 and tenants["west-0"] == ("west", "active")
            assert set(tenants) <= {"west-0", "west-1", "west-2"}
            assert {tenant for tenant, _ in tenants.values()} == {"west"}
            with pytest.raises(Refused) as unknown:
                await h.service.submit_conversation(west_conv.id, {"k": "v"}, "nope")
            assert unknown.value.problem == "tenant 'nope': no such tenant"
            await h.wait_active(4)

            code, stopped, _ = await ctl(control, "stop", "--tenant", "west", "--json")
            assert code == 0 and sorted(s["sessionId"] for s in stopped) == ["west-0", "west-1", "west-2"]
            assert h.runners["wm-0"].state.value == "active"  # the default tenant's session: not selected
            code, started, _ = await ctl(control, "start", "--tenant", "west", "--json")
            assert code == 0 and sorted(s["sessionId"] for s in started) == ["west-0", "west-1", "west-2"]
            await h.wait_active(4)
    # the update by conversation id is queued under west's credential (its key in the store)
    conn = sqlite3.connect(tmp_path / "store.sqlite3")
    try:
        keys = dict(conn.execute("SELECT update_id, tenant FROM updates").fetchall())
    finally:
        conn.close()
    assert keys == {accepted["updateId"]: "west/genesys:west-client"}


async def test_a_reload_adds_changes_rotates_and_removes_tenants_as_it_does_platforms(
    start_genesys: StartGenesys, tmp_path: Path
) -> None:
    """docs/configuration.md, "What a reload applies", for ``[tenants.NAME]``: a tenant added is built
    and its sessions start; a tenant's table changed restarts its sessions alone; its credential
    changed alone is rotated (tried first, no session restarted); a tenant removed with its sessions
    stops them and is gone from the wiring."""
    east = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=7)
    west = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=8)
    path = tmp_path / "supervisor.toml"

    def text(*, with_east: bool, west_timeout: float = 2.0) -> str:
        lines = ["[daemon]", "seed = 7", "shutdownGrace = 2.0", "[reconnect]", "firstDelayMin = 0.2"]
        lines += ["firstDelayMax = 0.4"]
        lines += tenant_table("west", dict(west.urls), secret="west-secret", open_timeout=west_timeout)
        if with_east:
            lines += tenant_table("east", dict(east.urls), secret="east-secret")
        lines += ["[[sessions]]", 'id = "west-0"', 'platform = "genesys"', 'kind = "notifications"']
        lines += ['agentId = "w"', 'tenant = "west"']
        if with_east:
            lines += ["[[sessions]]", 'id = "east-0"', 'platform = "genesys"', 'kind = "notifications"']
            lines += ['agentId = "e"', 'tenant = "east"']
        return "\n".join(lines) + "\n"

    (tmp_path / "west-secret").write_text("west-secret-1")
    (tmp_path / "east-secret").write_text("east-secret-1")
    path.write_text(text(with_east=False))
    async with supervised(load_config(path), tmp_path, credentials=Credentials(None, None, None)) as h:
        await h.wait_active(1)
        wiring = h.supervisor.wiring
        west_scope, east_scope = TenantScope("west", Platform.GENESYS), TenantScope("east", Platform.GENESYS)
        assert set(wiring.tokens) == {west_scope}

        async def reload() -> ReloadResult:
            return await Reloader(h.supervisor, lambda: load_config(path)).reload()

        path.write_text(text(with_east=True))
        added = await reload()
        assert (added.error, added.added, added.restarted) == (None, ("east-0",), ())
        await h.wait_active(2)
        assert set(wiring.tokens) == {west_scope, east_scope}
        assert east.recorder.tokens().get("issued") == 1  # east's own client, on east's org

        west_cache = wiring.tokens[west_scope]
        path.write_text(text(with_east=True, west_timeout=3.0))
        changed = await reload()
        assert (changed.error, changed.restarted) == (None, ("west-0",))  # east-0 untouched
        assert wiring.tokens[west_scope] is not west_cache  # the tenant rebuilt, as a platform's table
        await h.wait_active(2)

        (tmp_path / "west-secret").write_text("west-secret-2")
        rotated = await reload()
        assert (rotated.error, rotated.restarted, rotated.rotated) == (None, (), (west_scope,))
        assert answer(rotated)["credentialsRotated"] == ["west/genesys"]

        path.write_text(text(with_east=False, west_timeout=3.0))
        removed = await reload()
        assert (removed.error, removed.removed, removed.restarted) == (None, ("east-0",), ())
        assert set(wiring.tokens) == {west_scope} and east_scope not in wiring.pipelines
        assert h.runners["west-0"].state.value == "active" and "east-0" not in h.runners


async def test_updates_pending_in_an_existing_store_keep_flowing_beside_a_named_tenants(
    start_genesys: StartGenesys, clock: FakeClock, tmp_path: Path
) -> None:
    """A store of the current schema written before tenants (tests/fixtures/store, v4): its pending
    updates (keyed ``genesys:...``, the default tenant's key as it always was) go to the default
    tenant's org, never to a named tenant's; a named tenant's update by conversation id is keyed
    ``west/genesys:<clientId>`` and written on west's org with west's credential."""
    home = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=9, clock=clock)
    west = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=10, clock=clock)
    store = tmp_path / "store.sqlite3"
    shutil.copyfile(V4_STORE, store)
    conn = sqlite3.connect(f"file:{V4_STORE}?immutable=1", uri=True)
    try:
        pending = conn.execute("SELECT DISTINCT tenant, conversation_id FROM outbox").fetchall()
    finally:
        conn.close()
    assert pending and all(tenant.startswith("genesys:") for tenant, _ in pending)
    text = attributes_config(home.urls, [], store=store)
    text += "\n".join(tenant_table("west", dict(west.urls))) + "\n"
    west_conv = west.create_conversation()
    async with supervised(text, tmp_path, clock=clock, sleep=advancing(clock), durable=True) as h:
        service = h.service
        answer = await service.submit_conversation(west_conv.id, {"wrapup": "sale"}, "west")
        outcomes = await h.settle()
        assert set(outcomes) >= {"u-1", "u-2", "u-conv-9", answer.update_id}
        assert outcomes[answer.update_id] is UpdateOutcome.VERIFIED
    # the fixture's updates were sent to the default tenant's org (which refuses their made-up ids: 400,
    # flagged), never to west's, which read only its own conversation
    fixture_updates = {u for u in outcomes if u.startswith("u-")}
    assert fixture_updates >= {"u-1", "u-2", "u-conv-9"}
    assert {outcomes[u] for u in fixture_updates} == {UpdateOutcome.FLAGGED}
    reads = "/api/v2/conversations/{conversationId}"
    assert home.recorder.request_count(method="GET", endpoint=reads, status=400) >= 3
    assert home.recorder.request_count(method="GET", endpoint=reads, status=200) == 0
    west_reads = west.recorder.request_count(method="GET", endpoint=reads)
    assert west_reads == west.recorder.request_count(method="GET", endpoint=reads, status=200) > 0
    assert dict(west_conv.customer().attributes) == {"wrapup": "sale"}
    conn = sqlite3.connect(store)
    try:
        keys = dict(conn.execute("SELECT update_id, tenant FROM updates").fetchall())
    finally:
        conn.close()
    assert keys[answer.update_id] == "west/genesys:west-client"
    assert keys["u-conv-9"] == "genesys:https://api.example.test"  # the stored key, as it was


async def test_a_cxone_tenant_logs_in_polls_and_is_paced_on_endpoints_of_its_own(
    start_cxone: StartCxone, tmp_path: Path
) -> None:
    """A ``[tenants.NAME]`` of platform ``cxone`` (a configuration with no ``[platforms]`` table): its
    session logs in with the tenant's access key, discovers the tenant's API, starts and polls; every
    endpoint it used is the tenant's (``bu-7/cxone:...``), none the default tenant's."""
    sim = await start_cxone(seed=11)
    text = cxone_config(sim.urls, 1).replace("[platforms.cxone]", '[tenants.bu-7]\nplatform = "cxone"')
    text = text.replace(
        'platform = "cxone"\nkind = "agent-session"',
        'platform = "cxone"\nkind = "agent-session"\ntenant = "bu-7"',
    )
    async with supervised(text, tmp_path) as h:
        await h.wait_active(1)
        assert h.runners["cx-0"].context.tenant == "bu-7"
        used = {str(e) for e in h.supervisor.wiring.attempts.endpoints.all()}
        assert used >= {"bu-7/cxone:oauth", "bu-7/cxone:agent-sessions", "bu-7/cxone:api"}
        assert all(e.startswith("bu-7/") for e in used), used
        transitions = [e for e in h.recorded.named("SESSION_TRANSITION") if e["machineId"] == "cx-0"]
        assert transitions and transitions[-1]["to"] == "active"
        assert {e.get("tenant") for e in transitions} == {"bu-7"}  # its event lines name its tenant


async def test_each_tenants_shared_channels_are_its_own_clients(
    start_genesys: StartGenesys, tmp_path: Path
) -> None:
    """With shared notification channels, each tenant's agents share channels of its own OAuth client
    (its pool ``NAME/<clientId>``), made on its own org through its own pipeline and streaming endpoint."""
    east = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=12)
    west = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=13)
    lines = ["[daemon]", "seed = 7", "shutdownGrace = 2.0", "[reconnect]", "firstDelayMin = 0.2"]
    lines += ["firstDelayMax = 0.4"]
    for name, sim in (("east", east), ("west", west)):
        table = tenant_table(name, dict(sim.urls))
        at = table.index(f"[tenants.{name}.keepalive]")
        lines += [*table[:at], "sharedChannels = true", *table[at:]]
    for name in ("east", "west"):
        for i in range(2):
            lines += [
                "[[sessions]]",
                f'id = "{name}-nt-{i}"',
                'platform = "genesys"',
                'kind = "notifications"',
            ]
            lines += [f'agentId = "{name}-{i}"', f'tenant = "{name}"']
    async with supervised("\n".join(lines) + "\n", tmp_path) as h:
        await h.wait_active(4)
        pools = h.supervisor.wiring.channel_pools.pools
        assert {key: len(pool.channels) for key, pool in pools.items()} == {
            "east/east-client": 1,
            "west/west-client": 1,
        }
        made = "/api/v2/notifications/channels"
        assert east.recorder.request_count(method="POST", endpoint=made, status=200) == 1
        assert west.recorder.request_count(method="POST", endpoint=made, status=200) == 1
        used = {str(e) for e in h.supervisor.wiring.attempts.endpoints.all()}
        assert {"east/genesys:streaming", "west/genesys:streaming"} <= used
        assert not {e for e in used if "/" not in e}  # no default tenant's endpoint was used
