"""Manual circuit control (docs/runtime.md, "Manual circuit control"), against the Genesys simulator.

An endpoint an operator isolates admits nothing: its sessions wait in ``reconnecting`` and their
horizon does not run (an isolation ten horizons long ends no session), REST calls to it fail at once
with nothing sent, attribute updates stay queued (neither sent nor flagged) and flow after ``close``;
an isolation given ``--for`` ends by itself. The daemon runs on a fake clock and fake timers: time is
moved by the test, nothing sleeps for it. The CLI's verbs, as a script calls them, are held in
``test_ctl_circuit_as_a_script_uses_it`` (a daemon and ``ctl`` as subprocesses).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.clock import FakeClock
from supervisor.errors import CircuitOpenError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import UpdateOutcome
from supervisor.vocabulary import GENESYS_WEBMESSAGING, CircuitState, EndpointId, Platform, SessionState
from tests.harness.clocks import FakeTimers
from tests.harness.config import attributes_config, genesys_config
from tests.harness.in_process import Harness, supervised
from tests.harness.waits import wait_until
from tests.integration.attributes_harness import customer_attributes, durable_daemon
from tests.integration.test_api_cli import Output, active, ctl, start_daemon, write_config

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

GENESYS_API = EndpointId.api(Platform.GENESYS)
HORIZON_S = 5.0


def states(h: Harness) -> set[SessionState]:
    return {r.state for r in h.runners.values()}


def handshakes(sim: GenesysSimulator) -> int:
    return sim.recorder.attempts_total("webmessaging")["accepted"]


async def advance_until(
    timers: FakeTimers, done: Callable[[], bool], step: float = 0.1, limit_s: float = 10.0
) -> None:
    """Move the fake clock ``step`` at a time (real waits for the loopback I/O in between) until ``done``."""
    with anyio.fail_after(limit_s):
        while not done():
            timers.advance(step)
            await anyio.sleep(0.01)  # the loopback sockets answer (real I/O), not a timer


async def advance(h: Harness, timers: FakeTimers, seconds: float, step: float = 1.0) -> None:
    """Move the fake clock ``seconds`` in steps, letting the daemon run what each step makes due."""
    moved = 0.0
    while moved < seconds:
        timers.advance(step)
        moved += step
        for _ in range(20):  # what became due runs (and parks on its next timer) before time moves on
            await anyio.lowlevel.checkpoint()


@pytest.mark.genesys_sim(seed=31, fake_clock=True)
async def test_an_isolation_longer_than_the_horizon_ends_no_session(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    timers = FakeTimers(clock)
    # an open period far longer than the test moves time: the sessions must be woken when it ends
    config = genesys_config(genesys_sim.urls, 2, horizon=HORIZON_S, open_for=600.0)
    async with supervised(config, tmp_path, clock=clock, sleep=timers) as h:
        await advance_until(timers, lambda: len(h.runners) == 2 and h.all_in("active"))
        before = handshakes(genesys_sim)
        move = h.supervisor.manual_circuits.isolate(GENESYS_WEBMESSAGING)
        assert (move.previous, move.state, move.changed) == (CircuitState.CLOSED, CircuitState.ISOLATED, True)
        # the platform drops both sockets (its maintenance): the sessions wait to reconnect
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP, count=2))
        await wait_until(lambda: states(h) == {SessionState.RECONNECTING}, 10)
        # twelve horizons of isolation, in one-second steps
        await advance(h, timers, 12 * HORIZON_S)
        assert h.terminations() == {}
        assert states(h) == {SessionState.RECONNECTING}
        assert handshakes(genesys_sim) == before  # nothing was attempted against the isolated endpoint
        throttled = h.recorded.named("RECONNECTION_THROTTLED")
        assert {e["sessionId"] for e in throttled} == {"wm-0", "wm-1"}
        assert all(e["attempt"] == 1 for e in throttled)  # deferred, never counted
        manual = h.recorded.named("CIRCUIT_MANUAL")
        assert [(e["action"], e["previous"], e["state"]) for e in manual] == [
            ("isolate", "closed", "isolated")
        ]
        assert h.recorded.named("CIRCUIT_BREAKER_OPEN") == []  # nobody's failure
        # the isolation ends: the held sessions are woken at once, not after their timers
        h.supervisor.manual_circuits.close(GENESYS_WEBMESSAGING)
        # (the connect endpoint paces them: its slots are on the fake clock, moved a little at a time)
        await advance_until(timers, lambda: h.all_in("active"), step=0.01)
        assert h.terminations() == {}
        assert handshakes(genesys_sim) == before + 2
        assert [e["action"] for e in h.recorded.named("CIRCUIT_MANUAL")] == ["isolate", "close"]


@pytest.mark.genesys_sim(seed=32, fake_clock=True)
async def test_an_isolation_given_a_period_ends_by_itself(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    timers = FakeTimers(clock)
    config = genesys_config(genesys_sim.urls, 1, horizon=HORIZON_S, open_for=600.0)
    async with supervised(config, tmp_path, clock=clock, sleep=timers) as h:
        await advance_until(timers, lambda: len(h.runners) == 1 and h.all_in("active"))
        circuits = h.supervisor.wiring.circuits
        # genesys:api: nobody asks it anything, so only the daemon's timer can end its isolation
        h.supervisor.manual_circuits.isolate(GENESYS_API, 20.0)
        h.supervisor.manual_circuits.isolate(GENESYS_WEBMESSAGING, 20.0)
        isolated = h.recorded.named("CIRCUIT_MANUAL")
        assert [e["forS"] for e in isolated] == [20.0, 20.0] and all(e["until"] for e in isolated)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP, count=1))
        await wait_until(lambda: states(h) == {SessionState.RECONNECTING}, 10)
        await advance(h, timers, 19.0)
        assert circuits.get(GENESYS_API).state is CircuitState.ISOLATED
        assert circuits.get(GENESYS_WEBMESSAGING).state is CircuitState.ISOLATED
        await advance(h, timers, 1.0)
        await wait_until(lambda: len(h.recorded.named("CIRCUIT_MANUAL")) == 4, 10)
        ended = {e["circuitId"]: e for e in h.recorded.named("CIRCUIT_MANUAL")[2:]}
        assert {(e["action"], e["previous"], e["state"]) for e in ended.values()} == {
            ("expire", "isolated", "closed")
        }
        assert circuits.get(GENESYS_API).state is CircuitState.CLOSED
        # the session it held comes back at once (its open period is ten minutes: it was woken)
        await advance_until(timers, lambda: h.all_in("active"), step=0.01)
        assert h.terminations() == {}


@pytest.mark.genesys_sim(seed=33)
async def test_rest_calls_to_an_isolated_endpoint_fail_at_once_with_nothing_sent(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    conversation = genesys_sim.create_conversation().id
    config = genesys_config(genesys_sim.urls, 1, conversations=(conversation,))
    async with supervised(config, tmp_path) as h:
        await h.wait_active(1)
        url = f"{genesys_sim.urls['api']}/api/v2/conversations/{conversation}"
        assert (await h.supervisor.request("wm-0", "GET", url)).status_code == 200
        sent = genesys_sim.recorder.request_count("GET")
        h.supervisor.manual_circuits.isolate(GENESYS_API)
        with anyio.fail_after(1.0), pytest.raises(CircuitOpenError) as refused:
            await h.supervisor.request("wm-0", "GET", url)
        assert refused.value.isolated and refused.value.circuit_id == GENESYS_API.circuit_id
        assert genesys_sim.recorder.request_count("GET") == sent
        # nothing failed: nothing was classified, and the session is untouched
        assert h.recorded.named("SDK_ERROR_CLASSIFIED") == []
        assert h.all_in("active")
        h.supervisor.manual_circuits.reset(GENESYS_API)
        assert (await h.supervisor.request("wm-0", "GET", url)).status_code == 200


@pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=34, fake_clock=True)
async def test_attribute_updates_stay_queued_while_isolated_and_flow_after_close(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conversation = genesys_sim.create_conversation().id
    text = attributes_config(genesys_sim.urls, [conversation], store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(1)
        service = h.service
        # one update verified first: its read-back is the next send's pre-read, so the next send
        # claims its writes and meets the circuit at the PATCH itself
        await service.submit("wm-0", {"first": "1"})
        assert set((await h.settle()).values()) == {UpdateOutcome.VERIFIED}
        patches = genesys_sim.recorder.request_count("PATCH")
        h.supervisor.manual_circuits.isolate(GENESYS_API)
        await service.submit("wm-0", {"survey": "yes", "disposition": "resolved"})
        # far more rounds than a write's sends (maxSends 8): a refused send is no send
        for _ in range(30):
            await service.run_due()
            due = service.scheduler.next_due()
            assert due is not None
            clock.set(max(due, clock.monotonic()))
        outcomes = await service.outcomes()
        # (one update per submission: the first verified, the second still queued)
        assert sorted(outcomes.values()) == [UpdateOutcome.PENDING, UpdateOutcome.VERIFIED]
        assert genesys_sim.recorder.request_count("PATCH") == patches
        assert h.recorded.named("ATTRIBUTE_MISMATCH") == [] and await service.mismatches() == []
        status = await service.status()
        assert status["rows"]["flagged"] == 0
        # the PATCH the circuit refused was never sent: it counts as no send of the writes it carried
        store = h.durable.store if h.durable is not None else None
        assert store is not None
        queued = [r for r in await store.live_rows() if r.attribute in ("survey", "disposition")]
        assert len(queued) == 2 and all(r.sends == 0 for r in queued)
        h.supervisor.manual_circuits.close(GENESYS_API)
        assert set((await h.settle()).values()) == {UpdateOutcome.VERIFIED}
        held = customer_attributes(genesys_sim, conversation)
        assert (held["survey"], held["disposition"]) == ("yes", "resolved")


# -- the command line, as a script uses it --------------------------------------------------------


@pytest.fixture
def sockets() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-", dir="/tmp") as d:
        yield Path(d)


def daemon_lines(daemon: Output, name: str) -> list[dict[str, object]]:
    return [r for r in daemon.records if r.get("event") == name]


@pytest.mark.genesys_sim(seed=35)
async def test_ctl_circuit_as_a_script_uses_it(
    genesys_sim: GenesysSimulator, tmp_path: Path, sockets: Path
) -> None:
    config = write_config(genesys_sim, tmp_path, sockets, sessions=2)
    process, daemon = await start_daemon(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(daemon.pump)
        await wait_until(lambda: active(daemon, 2), 20)

        code, out, err = await ctl(
            sockets, "circuit", "isolate", "genesys:webmessaging", "--for", "600", "--json"
        )
        assert (code, err) == (0, "")
        assert json.loads(out) == {
            "endpoint": "genesys:webmessaging",
            "circuitId": "circuit:genesys:webmessaging",
            "previous": "closed",
            "state": "isolated",
            "changed": True,
            "forSeconds": 600.0,
        }
        code, out, _ = await ctl(sockets, "status", "--json")
        circuits = {c["endpoint"]: c["state"] for c in json.loads(out)["circuits"]}
        assert code == 0 and circuits["genesys:webmessaging"] == "isolated"
        await wait_until(lambda: bool(daemon_lines(daemon, "CIRCUIT_MANUAL")), 10)
        (manual,) = daemon_lines(daemon, "CIRCUIT_MANUAL")
        assert (manual["circuitId"], manual["action"], manual["forS"]) == (
            "circuit:genesys:webmessaging",
            "isolate",
            600.0,
        )
        assert daemon_lines(daemon, "CIRCUIT_BREAKER_OPEN") == []

        # an endpoint the daemon does not have: a typed refusal naming those it has, exit 1
        code, out, err = await ctl(sockets, "circuit", "isolate", "genesys:nope", "--json")
        assert code == 1 and err.count("\n") == 1 and "NoSuchEndpoint" in err and "genesys:api" in err
        refusal = json.loads(out)
        assert refusal["error"].endswith(".NoSuchEndpoint") and "genesys:webmessaging" in refusal["endpoints"]
        # bad usage: exit 2, nothing sent
        for bad in (
            ["isolate", "genesys:api", "--for", "0"],
            ["isolate", "genesys:api", "--for", "x"],
            ["close"],
        ):
            code, _, err = await ctl(sockets, "circuit", *bad)
            assert code == 2 and "usage error" in err and err.count("\n") == 1
        # closing a circuit that is closed changes nothing; a reset of one that is closed clears it
        code, out, _ = await ctl(sockets, "circuit", "close", "genesys:api")
        assert (code, out.strip()) == (0, "circuit genesys:api: closed, unchanged")
        code, out, _ = await ctl(sockets, "circuit", "close", "genesys:webmessaging", "--json")
        assert code == 0 and (json.loads(out)["previous"], json.loads(out)["state"]) == ("isolated", "closed")
        code, out, _ = await ctl(sockets, "circuit", "reset", "genesys:webmessaging")
        assert (code, out.strip()) == (0, "circuit genesys:webmessaging: closed -> closed")

        await wait_until(lambda: len(daemon_lines(daemon, "CONTROL_COMMAND")) >= 4, 10)
        verbs = [(r["verb"], r["ok"], r.get("target")) for r in daemon_lines(daemon, "CONTROL_COMMAND")]
        assert verbs[:2] == [
            ("circuit.isolate", True, "genesys:webmessaging"),
            ("circuit.isolate", False, "genesys:nope"),
        ]
        await ctl(sockets, "drain")
        with anyio.fail_after(20):
            assert await process.wait() == 0
