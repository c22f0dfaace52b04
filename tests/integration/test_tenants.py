"""Two Genesys tenants in one daemon: one tenant's outage with 429s never holds the other's sessions.

Two Genesys simulators over real loopback sockets, one per org (``[tenants.east]``, ``[tenants.west]``),
each with its own OAuth client; the socket API over real Unix sockets. East's platform drops every
socket and answers everything with 429 (and its REST API with 503): east's endpoints pause and its
circuits open, west's sessions stay active, its endpoints are never paused nor tripped, and west's
simulator never answered a 429 (docs/configuration.md, "Tenants").
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.in_process import Harness
from tests.harness.process import CLI, Daemon, running_daemon
from tests.harness.simulators import StartGenesys
from tests.integration.api_harness import Conn, api_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PER_TENANT = 2  # Web Messaging guests per tenant (and one notifications session each)


def tenant_table(name: str, urls: dict[str, str]) -> list[str]:
    return [
        f"[tenants.{name}]",
        'platform = "genesys"',
        f'loginUrl = "{urls["login"]}"',
        f'apiUrl = "{urls["api"]}"',
        f'webmessagingUrl = "{urls["webmessaging"]}"',
        f'streamingUrl = "{urls["streaming"]}"',
        f'clientId = "{name}-client"',
        'clientSecretFile = "genesys-secret"',
        'deploymentId = "dep-1"',
        f"[tenants.{name}.keepalive]",
        "echoInterval = 0",
        "pingInterval = 5.0",
        "pingTimeout = 5.0",
        "openTimeout = 2.0",
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
        assert [(r["sessionId"], r["state"]) for r in west_rows] == [
            *((f"west-wm-{i}", "active") for i in range(PER_TENANT)),
            ("west-nt", "active"),
        ]
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


async def ctl(
    daemon: Daemon, *args: str, stdin: bytes | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """``ctl`` as a script runs it: a subprocess; its exit code, its JSON lines, its stderr."""
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", str(daemon.control), *args], input=stdin, check=False
    )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    return done.returncode, lines, done.stderr.decode()


async def test_the_tenant_names_scripts_rely_on_from_the_command_line(
    start_genesys: StartGenesys, tmp_path: Path
) -> None:
    """``sessions[].tenant``, ``ctl sessions add --tenant`` and NDJSON ``tenant``, ``--tenant`` on ``ctl
    sessions|start|stop``, the rows' and ``Status`` circuits' ``tenant``, ``ctl attributes set
    --conversation ID --tenant T``: against a daemon run as a process, the default tenant on one
    simulator and ``[tenants.west]`` on another."""
    home = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=5)
    west = await start_genesys(GenesysSimConfig(token_ttl_s=3600), seed=6)
    west_conv = west.create_conversation()
    with tempfile.TemporaryDirectory(prefix="ss-ten-", dir="/tmp") as d:
        workdir = Path(d)
        extra = "\n".join(tenant_table("west", dict(west.urls))) + "\n"
        extra += '[[sessions]]\nid = "west-0"\nplatform = "genesys"\nkind = "webmessaging"\ntenant = "west"\n'
        config = daemon_config(
            home.urls, workdir, [("wm-0", None)], store=workdir / "store.sqlite3", extra=extra
        )
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(2)
            code, added, err = await ctl(
                daemon, "sessions", "add", "west-1", "--kind", "webmessaging", "--tenant", "west", "--json"
            )
            assert (code, [(a["sessionId"], a["added"]) for a in added]) == (0, [("west-1", True)]), err
            bad = b'{"id": "x-1", "kind": "webmessaging", "tenant": "nope"}\n'
            code, refused, err = await ctl(daemon, "sessions", "add", "--from", "-", "--json", stdin=bad)
            assert code == 1 and refused[0]["added"] is False
            assert (
                "sessions[0].tenant: no tenant 'nope' ([tenants.nope])" in err and len(err.splitlines()) == 1
            )
            await daemon.wait_ready(3)

            code, listed, _ = await ctl(daemon, "sessions", "--tenant", "west", "--json")
            assert code == 0
            assert [(r["sessionId"], r["tenant"], r["state"]) for r in listed[0]["sessions"]] == [
                ("west-0", "west", "active"),
                ("west-1", "west", "active"),
            ]
            code, status, _ = await ctl(daemon, "status", "--json")
            circuits = {c["endpoint"]: c.get("tenant") for c in status[0]["circuits"]}
            assert circuits.get("west/genesys:webmessaging") == "west"
            assert circuits.get("genesys:webmessaging", "absent") is None  # the default tenant's: no tenant

            code, stopped, _ = await ctl(daemon, "stop", "--tenant", "west", "--json")
            assert code == 0 and sorted(s["sessionId"] for s in stopped) == ["west-0", "west-1"]
            code, listed, _ = await ctl(daemon, "sessions", "--json")
            states = {r["sessionId"]: r["state"] for r in listed[0]["sessions"]}
            assert states == {"wm-0": "active", "west-0": "terminated", "west-1": "terminated"}
            code, started, _ = await ctl(daemon, "start", "--tenant", "west", "--json")
            assert code == 0 and sorted(s["sessionId"] for s in started) == ["west-0", "west-1"]

            # a conversation by id, written with west's credential on west's org
            code, answer, err = await ctl(
                daemon,
                "attributes",
                "set",
                "--conversation",
                west_conv.id,
                "--tenant",
                "west",
                "wrapup=sale",
                "--json",
            )
            assert code == 0 and answer[0]["accepted"] is True, err
            await daemon.settled()
            assert dict(west_conv.customer().attributes) == {"wrapup": "sale"}
            assert home.recorder.request_count(method="PATCH") == 0
            code, refused, err = await ctl(
                daemon,
                "attributes",
                "set",
                "--conversation",
                west_conv.id,
                "--tenant",
                "nope",
                "a=1",
                "--json",
            )
            assert code == 1 and refused[0]["error"].endswith(".Unsupported") and "tenant 'nope'" in err
            assert await daemon.stop() == 0
