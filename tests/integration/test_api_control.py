"""The control socket end to end, the daemon against the Genesys simulator (docs/socket-api.md).

Every verb over a real Unix socket: answered with a result or a typed error, and every verb
that changes something published as CONTROL_COMMAND with the caller's uid and pid.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import ApiFault, Method
from supervisor.errors import ConfigError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.taxonomy.envelope import envelope_from_object
from supervisor.transports.webmessaging import WebMessagingTransport
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn, Watcher, api_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=9)]

V1 = (resources.files("supervisor.taxonomy") / "data" / "v1.toml").read_text(encoding="utf-8")
THROTTLED = Path(__file__).parent.parent / "fixtures" / "taxonomy" / "throttled.toml"


async def call(h: Harness, method: str, parameters: dict[str, Any] | None = None) -> Any:
    conn = await Conn.open(h.control)
    try:
        return await conn.call(method, parameters)
    finally:
        await conn.aclose()


def commands(h: Harness) -> list[dict[str, Any]]:
    return h.recorded.named("CONTROL_COMMAND")


def by_us(event: dict[str, Any]) -> bool:
    return event["by"] == {"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid()}


async def test_status_sessions_and_show(genesys_sim: GenesysSimulator, tmp_path: Path) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 3), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        status = (await call(h, Method.STATUS)).parameters
        assert status["bootId"] == h.supervisor.bus.boot_id
        assert status["uptimeSeconds"] >= 0 and status["taxonomy"] == "v2" and not status["draining"]
        assert status["sessions"] == {"total": 3, "byState": {"active": 3}}
        assert status["circuits"] == [
            {
                "endpoint": "genesys:webmessaging",
                "circuitId": "circuit:genesys:webmessaging",
                "state": "closed",
            }
        ]
        listed = (await call(h, Method.LIST_SESSIONS, {"sessions": ["wm-2", "wm-0"]})).parameters["sessions"]
        assert sorted(s["sessionId"] for s in listed) == ["wm-0", "wm-2"]
        shown = (await call(h, Method.SHOW_SESSION, {"sessionId": "wm-1"})).parameters["session"]
        assert (
            shown["state"] == "active"
            and shown["conversationId"] == h.runners["wm-1"].context.conversation_id
        )
        missing = await call(h, Method.SHOW_SESSION, {"sessionId": "nope"})
        assert missing.error == ApiFault.NO_SUCH_SESSION and missing.parameters["sessionId"] == "nope"
        bad = await call(h, Method.SHOW_SESSION, {"sessionId": 7})
        assert bad.error == ApiFault.INVALID_PARAMETER
        assert commands(h) == []  # reading changes nothing and publishes nothing


async def test_stop_closes_the_session_with_1000_and_says_who_did_it(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        watcher = await Watcher.subscribe(h.subscribe, {"streams": ["control"]})
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await wait_until(lambda: bool(watcher.messages))
            stopped = await call(h, Method.STOP_SESSION, {"sessionId": "wm-1"})
            assert stopped.parameters == {"sessionId": "wm-1", "state": "terminated"}
            await wait_until(lambda: genesys_sim.recorder.events("client_close", code=1000) == 1)
            again = await call(h, Method.STOP_SESSION, {"sessionId": "wm-1"})
            assert again.error is None  # idempotent
            unknown = await call(h, Method.STOP_SESSION, {"sessionId": "wm-9"})
            assert unknown.error == ApiFault.NO_SUCH_SESSION
            # subscribers see who asked, then what it did
            await wait_until(lambda: len(watcher.of("event")) == 3 and bool(watcher.of("delta")))
            events = watcher.of("event")
            assert [(e["verb"], e.get("sessionId"), e["ok"]) for e in events] == [
                ("stop", "wm-1", True),
                ("stop", "wm-1", True),
                ("stop", "wm-9", False),
            ]
            assert all(by_us(e) for e in events) and events[2]["error"] == ApiFault.NO_SUCH_SESSION
            delta = watcher.of("delta")[0]
            assert (delta["sessionId"], delta["state"], delta["reason"]) == ("wm-1", "terminated", "STOPPED")
            assert events[0]["seq"] < delta["seq"]
            tg.cancel_scope.cancel()
        assert h.runners["wm-0"].state.value == "active"


async def test_start_after_a_fail_fast_reauthenticates_as_a_new_session(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The seed's user-initiated re-authentication: today's only way back without restarting the daemon."""
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        running = await call(h, Method.START_SESSION, {"sessionId": "wm-0"})
        assert running.error == ApiFault.SESSION_RUNNING and running.parameters["state"] == "active"
        old = h.runners["wm-0"]
        assert isinstance(old.transport, WebMessagingTransport)
        old_guest = old.transport.guest_token
        # the platform lost both guest sessions: resumed, they are answered `newSession: true`
        genesys_sim.state.sessions.clear()
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(lambda: old.core.terminated and h.runners["wm-1"].core.terminated)
        terminated = h.recorded.named("SESSION_TERMINATED")
        assert {(t["sessionId"], t["action"]) for t in terminated} == {
            ("wm-0", "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"),
            ("wm-1", "REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE"),
        }
        shown = (await call(h, Method.SHOW_SESSION, {"sessionId": "wm-0"})).parameters["session"]
        assert shown["state"] == "terminated"
        assert shown["termination"]["trigger"] == "CONVERSATION_STATE_DRIFT"
        genesys_sim.faults.clear()
        watcher = await Watcher.subscribe(h.subscribe, {"filter": {"sessions": ["wm-0"]}})
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await wait_until(lambda: bool(watcher.messages))
            started = await call(h, Method.START_SESSION, {"sessionId": "wm-0"})
            assert started.parameters == {"sessionId": "wm-0", "state": "connecting", "reauthenticated": True}
            new = h.runners["wm-0"]
            assert new is not old
            await h.wait(lambda: new.state.value == "active")
            # a full authentication cycle: a new guest session (a new token), not a resume of the old
            assert isinstance(new.transport, WebMessagingTransport)
            assert new.transport.guest_token and new.transport.guest_token != old_guest
            await wait_until(lambda: len(watcher.of("delta")) == 2)
            path = [(d["previous"], d["state"], d["reason"]) for d in watcher.of("delta")]
            assert path == [("terminated", "connecting", "STARTED"), ("connecting", "active", "VALIDATED")]
            tg.cancel_scope.cancel()
        start = [e for e in commands(h) if e["verb"] == "start"]
        assert [(e["sessionId"], e["ok"]) for e in start] == [("wm-0", False), ("wm-0", True)]
        assert h.runners["wm-1"].core.terminated  # only what was asked for came back


@pytest.fixture
def taxonomy_files(tmp_path: Path) -> tuple[Path, Path]:
    staged = tmp_path / "staged.toml"
    staged.write_text(V1.replace('version = "v1"', 'version = "v1-staged"', 1))
    broken = tmp_path / "broken.toml"
    broken.write_text(V1.replace("schema = 1", "schema = 99", 1))
    return staged, broken


async def test_a_taxonomy_switch_is_validated_first(
    genesys_sim: GenesysSimulator, tmp_path: Path, taxonomy_files: tuple[Path, Path]
) -> None:
    staged, broken = taxonomy_files
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        classifier = h.supervisor.wiring.classifier
        refused = await call(h, Method.USE_TAXONOMY, {"version": str(broken)})
        assert refused.error == ApiFault.INVALID_TAXONOMY
        assert "schema" in refused.parameters["problem"] and classifier.taxonomy.version == "v2"
        for version, problem in [
            ("v7", "not shipped"),
            ("relative/staged.toml", "absolute path"),
            ("/dev/zero", "not a regular file"),
            (str(tmp_path / "missing.toml"), "No such file"),
        ]:
            answer = await call(h, Method.USE_TAXONOMY, {"version": version})
            assert answer.error == ApiFault.INVALID_TAXONOMY and problem in answer.parameters["problem"]
        assert classifier.taxonomy.version == "v2"
        switched = await call(h, Method.USE_TAXONOMY, {"version": str(staged)})
        assert switched.parameters == {"previous": "v2", "version": "v1-staged", "origin": str(staged)}
        assert classifier.taxonomy.version == "v1-staged"
        # every classification from now on is made by the new version
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        await h.wait(
            lambda: any(e["taxonomyVersion"] == "v1-staged" for e in h.recorded.named("SDK_ERROR_CLASSIFIED"))
        )
        announced = h.recorded.named("TAXONOMY_SWITCHED")
        assert [(e["previous"], e["version"]) for e in announced] == [("v2", "v1-staged")] and by_us(
            announced[0]
        )
        uses = [(e["target"], e["ok"]) for e in commands(h) if e["verb"] == "taxonomy.use"]
        assert uses[0] == (str(broken), False) and uses[-1] == (str(staged), True)


async def test_a_taxonomy_switch_takes_an_overlay_and_locates_a_bad_one(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """``ctl taxonomy use`` loads an overlay laid over its base (docs/taxonomy.md, "Overlays")."""
    bad = tmp_path / "bad.toml"
    bad.write_text('extends = "v9"\nversion = "bad"\n')
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
        classifier = h.supervisor.wiring.classifier
        refused = await call(h, Method.USE_TAXONOMY, {"version": str(bad)})
        assert refused.error == ApiFault.INVALID_TAXONOMY
        assert refused.parameters["problem"] == (
            f"{bad}: extends: taxonomy version 'v9' is not shipped (shipped: v1, v2; or give a path)"
        )
        assert classifier.taxonomy.version == "v2"
        switched = await call(h, Method.USE_TAXONOMY, {"version": str(THROTTLED)})
        assert switched.parameters == {"previous": "v2", "version": "v2-throttled", "origin": str(THROTTLED)}
        too_many = envelope_from_object({"platform": "genesys", "channel": "rest", "status": 429})
        assert classifier.classify(too_many, observe=False).code == "THROTTLED"


async def test_drain_and_reload(genesys_sim: GenesysSimulator, tmp_path: Path) -> None:
    stop = anyio.Event()
    reloads: list[int] = []

    async def reload() -> Mapping[str, Any]:
        reloads.append(1)
        if len(reloads) == 2:
            raise ConfigError("supervisor.toml: sessions[0].kind: a cxone session is an 'agent-session'")
        return {"started": [], "stopped": [], "restarted": []}

    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path, stop=stop, reload=reload) as h:
        ok = await call(h, Method.RELOAD)
        assert ok.parameters == {"result": {"started": [], "stopped": [], "restarted": []}}
        failed = await call(h, Method.RELOAD)
        assert failed.error == ApiFault.RELOAD_FAILED and "sessions[0].kind" in failed.parameters["problem"]
        assert not stop.is_set()
        drained = await call(h, Method.DRAIN)
        assert drained.parameters == {"draining": True, "handover": False} and stop.is_set()
        status = (await call(h, Method.STATUS)).parameters
        assert status["draining"] is True
        assert [(e["verb"], e["ok"]) for e in commands(h)] == [
            ("reload", True),
            ("reload", False),
            ("drain", True),
        ]


async def test_reload_is_a_typed_unsupported_until_the_daemon_has_one(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        for method in (Method.RELOAD, Method.DRAIN):
            answer = await call(h, method)
            assert answer.error == ApiFault.UNSUPPORTED and answer.parameters["method"] == method
        conn = await Conn.open(h.control)
        description = await conn.call(
            Method.GET_INTERFACE_DESCRIPTION, {"interface": "io.sessionsupervisor.control.v1"}
        )
        assert "method StartSession(" in description.parameters["description"]
        subscribe_here = await conn.call(Method.SUBSCRIBE, {})
        assert subscribe_here.error == ApiFault.INTERFACE_NOT_FOUND  # the stream is on the other socket
        await conn.aclose()
