"""The subscribe socket over real Unix sockets, the daemon against the Genesys simulator (docs/socket-api.md).

What is compared is always the stream against what the bus published: every transition, in
order, with the bus seq; snapshots consistent with the deltas after them; a stalled reader
never costing the others anything, and its own backlog never past its cap.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import ApiFault, Method
from supervisor.config import SocketsConfig
from supervisor.events import Published
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn, Watcher, api_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=5)]

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def connects(h: Harness) -> int:
    return sum(r.connects for r in h.runners.values())


async def drop_all_and_recover(h: Harness, sim: GenesysSimulator) -> None:
    n = len(h.runners)
    before = connects(h)
    sim.faults.clear()
    sim.faults.inject(Fault(kind=FaultKind.DROP))
    await h.wait(lambda: connects(h) >= before + n and h.all_in("active"), 20)


def transitions_after(h: Harness, seq: int) -> list[tuple[int, str, str, str]]:
    return [(e["seq"], e["sessionId"], e["from"], e["to"]) for e in h.bus_transitions if e["seq"] > seq]


def replay(snapshot: dict[str, Any], deltas: list[dict[str, Any]]) -> dict[str, str]:
    """Apply deltas to a snapshot as a client does, checking each leaves from the state it holds."""
    return follow([snapshot, *deltas])


def follow(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Read a whole stream as a client does: a snapshot resets the picture, a delta must leave from
    it, seq rises, and a "lagged" notice is always followed by a fresh snapshot."""
    view: dict[str, str] = {}
    seq = -1
    expect_snapshot = True
    for message in messages:
        kind = message["type"]
        if expect_snapshot:
            assert kind == "snapshot", message
            expect_snapshot = False
        if kind == "snapshot":
            view = {s["sessionId"]: s["state"] for s in message["sessions"]}
            seq = message["seq"]
        elif kind == "lagged":
            assert message["count"] > 0
            expect_snapshot = True
        elif kind in ("delta", "event"):
            # one bus event can be both a delta and an opt-in event (a start: CONTROL_COMMAND): same seq
            assert message["seq"] >= seq, message
            seq = message["seq"]
            if kind == "delta":
                assert message["previous"] == view[message["sessionId"]], message
                view[message["sessionId"]] = message["state"]
    return view


async def test_a_subscriber_sees_the_snapshot_then_every_transition_of_a_mass_drop_in_order(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    n = 12
    async with api_daemon(genesys_config(genesys_sim.urls, n), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == n and h.all_in("active"))
        watcher = await Watcher.subscribe(h.subscribe)
        # one that takes every stream too: then every bus seq reaches it, as a delta or an event
        everything = await Watcher.subscribe(h.subscribe, {"streams": ["all"]})
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            tg.start_soon(everything.run)
            await wait_until(lambda: bool(watcher.messages) and bool(everything.messages))
            snapshot = watcher.snapshot
            assert snapshot["type"] == "snapshot"
            assert snapshot["bootId"] == h.supervisor.bus.boot_id
            assert {s["sessionId"]: s["state"] for s in snapshot["sessions"]} == {
                f"wm-{i}": "active" for i in range(n)
            }
            for session in snapshot["sessions"]:
                assert ISO_UTC.match(session["since"]) and session["platform"] == "genesys"
                assert session["circuit"] == {"endpoint": "genesys:webmessaging", "state": "closed"}
                assert session["attempts"] == 0 and session["agentId"] == f"a-{session['sessionId'][3:]}"

            await drop_all_and_recover(h, genesys_sim)
            expected = transitions_after(h, snapshot["seq"])
            await wait_until(lambda: len(watcher.of("delta")) >= len(expected))
            deltas = watcher.of("delta")
            # every transition the bus published, none missing or extra, in bus order, with its seq
            assert [(d["seq"], d["sessionId"], d["previous"], d["state"]) for d in deltas] == expected
            assert [m["type"] for m in watcher.messages] == ["snapshot"] + ["delta"] * len(expected)
            for i in range(n):
                path = [(d["previous"], d["state"]) for d in deltas if d["sessionId"] == f"wm-{i}"]
                assert path == [
                    ("active", "reconnecting"),
                    ("reconnecting", "connecting"),
                    ("connecting", "active"),
                ]
            dropped = [d for d in deltas if d["state"] == "reconnecting"]
            assert {d["reason"] for d in dropped} == {"ABNORMAL_CLOSURE"}
            assert all(d["lastError"]["code"] == "ABNORMAL_CLOSURE" for d in dropped)
            assert all(ISO_UTC.match(d["at"]) for d in deltas)
            assert replay(snapshot, deltas) == {f"wm-{i}": "active" for i in range(n)}
            # no seq gap at all for the subscriber that asked for everything
            last = h.recorded.published[-1].seq
            await wait_until(lambda: everything.messages[-1]["seq"] >= last)
            first = everything.snapshot["seq"]
            assert [m["seq"] for m in everything.messages[1:]] == list(range(first + 1, last + 1))
            tg.cancel_scope.cancel()


async def test_a_subscriber_joining_mid_storm_gets_a_snapshot_consistent_with_the_deltas_after_it(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    n = 16
    config = genesys_config(genesys_sim.urls, n, first_min=0.3, first_max=1.5)
    async with api_daemon(config, tmp_path) as h:
        await h.wait(lambda: len(h.runners) == n and h.all_in("active"))
        before = connects(h)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
        # mid-storm: some sessions are back, some are still on their way
        await h.wait(
            lambda: (
                any(r.state.value == "active" for r in h.runners.values())
                and not h.all_in("active")
                and connects(h) > before
            )
        )
        watcher = await Watcher.subscribe(h.subscribe)
        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher.run)
            await h.wait(lambda: connects(h) >= before + n and h.all_in("active"), 20)
            await wait_until(lambda: bool(watcher.messages))
            snapshot = watcher.snapshot
            assert snapshot["type"] == "snapshot"
            states = {s["sessionId"]: s["state"] for s in snapshot["sessions"]}
            assert "active" in states.values() and set(states.values()) != {"active"}, states
            # the snapshot is the bus's picture as of its seq ...
            as_of: dict[str, str] = {f"wm-{i}": "active" for i in range(n)}
            for e in h.bus_transitions:
                if e["seq"] <= snapshot["seq"]:
                    as_of[e["sessionId"]] = e["to"]
            assert states == as_of
            # ... and the deltas after it are exactly what the bus published since, each leaving from it
            expected = transitions_after(h, snapshot["seq"])
            await wait_until(lambda: len(watcher.of("delta")) >= len(expected))
            deltas = watcher.of("delta")
            assert [(d["seq"], d["sessionId"], d["previous"], d["state"]) for d in deltas] == expected
            assert replay(snapshot, deltas) == {f"wm-{i}": "active" for i in range(n)}
            tg.cancel_scope.cancel()


async def test_a_subscriber_that_never_reads_is_lagged_then_cut_off_and_slows_nobody(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """The stalled one conflates, lags, is disconnected; the reader gets every delta and event in order."""
    n = 8
    cap = 16 * 1024
    sockets = SocketsConfig(subscriber_buffer_bytes=cap, lagged_disconnect_after=0.1)
    config = genesys_config(genesys_sim.urls, n, first_min=0.05, first_max=0.2)
    async with api_daemon(config, tmp_path, sockets=sockets) as h:
        await h.wait(lambda: len(h.runners) == n and h.all_in("active"))
        held: list[int] = []

        def measure(published: Published) -> None:
            held.append(max((s.outbox.pending_bytes for s in h.api.hub.subscribers), default=0))

        h.supervisor.bus.subscribe(measure)
        stalled = await Conn.open(h.subscribe)
        await stalled.send(Method.SUBSCRIBE, {"streams": ["all"]}, more=True)
        reader = await Watcher.subscribe(h.subscribe, {"streams": ["retries"]})
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader.run)
            await wait_until(lambda: len(h.api.hub.subscribers) == 2 and bool(reader.messages))
            snapshot = reader.snapshot
            for _ in range(40):
                if h.api.hub.lag_disconnects:
                    break
                await drop_all_and_recover(h, genesys_sim)
            assert h.api.hub.lag_disconnects == 1
            assert len(h.api.hub.subscribers) == 1  # only the reader is left
            cut = h.recorded.named("SUBSCRIBER_DISCONNECTED")
            assert len(cut) == 1 and cut[0]["reason"] == "lagged" and cut[0]["lags"] >= 1
            # the reader: every transition and every retry event, in bus order, nothing conflated or lost
            wanted = {"SESSION_TRANSITION", "RETRY_ATTEMPT", "RETRY_SUCCESS", "RETRY_EXHAUSTED"}
            expected = [
                e for _, name, e in h.recorded.events if name in wanted and e["seq"] > snapshot["seq"]
            ]
            await wait_until(lambda: len(reader.messages) - 1 >= len(expected))
            got = reader.messages[1:]
            assert [m["seq"] for m in got] == [e["seq"] for e in expected]
            assert [m["type"] for m in got] == [
                "delta" if e["event"] == "SESSION_TRANSITION" else "event" for e in expected
            ]
            assert not reader.of("lagged")
            replay(snapshot, reader.of("delta"))
            tg.cancel_scope.cancel()
        # the daemon never held more than the cap for anyone (one message's worth of slack at most)
        assert max(held) <= cap
        # the stalled connection was closed on it: what it reads ends, starting with its snapshot
        first = await stalled.reply()
        assert first is not None and first.parameters["type"] == "snapshot"
        while await stalled.reply() is not None:
            pass
        await stalled.aclose()


async def test_a_slow_subscriber_is_told_it_lagged_then_gets_a_fresh_snapshot(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    n = 8
    sockets = SocketsConfig(subscriber_buffer_bytes=4096, lagged_disconnect_after=60.0)
    config = genesys_config(genesys_sim.urls, n, first_min=0.05, first_max=0.2)
    async with api_daemon(config, tmp_path, sockets=sockets) as h:
        await h.wait(lambda: len(h.runners) == n and h.all_in("active"))
        slow = await Watcher.subscribe(h.subscribe, {"streams": ["all"]})
        await wait_until(lambda: len(h.api.hub.subscribers) == 1)
        outbox = h.api.hub.subscribers[0].outbox
        for _ in range(40):
            if outbox.lags:
                break
            await drop_all_and_recover(h, genesys_sim)
        assert outbox.lags >= 1
        async with anyio.create_task_group() as tg:
            tg.start_soon(slow.run)  # it reads again
            await wait_until(lambda: bool(slow.of("lagged")))
            await drop_all_and_recover(h, genesys_sim)
            last = h.recorded.published[-1].seq
            await wait_until(lambda: bool(slow.messages) and slow.messages[-1].get("seq", 0) >= last)
            types = [m["type"] for m in slow.messages]
            at = types.index("lagged")
            assert types[0] == "snapshot" and types[at + 1] == "snapshot"
            assert slow.messages[at]["count"] > 0
            # read as a client reads it, the stream leaves an exact picture (however often it lagged)
            assert follow(slow.messages) == {f"wm-{i}": "active" for i in range(n)}
            tg.cancel_scope.cancel()


async def test_when_the_daemon_stops_the_stream_ends_with_the_drain_then_closes(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with anyio.create_task_group() as tg:
        async with api_daemon(genesys_config(genesys_sim.urls, 3), tmp_path) as h:
            await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
            watcher = await Watcher.subscribe(h.subscribe, {"filter": {"states": ["terminated"]}})
            tg.start_soon(watcher.run)
            await wait_until(lambda: bool(watcher.messages))
            assert watcher.snapshot["sessions"] == []  # nobody is terminated yet
        await wait_until(lambda: watcher.closed)
    types = [m["type"] for m in watcher.messages]
    assert types == ["snapshot", "delta", "delta", "delta", "end"]
    assert {m["reason"] for m in watcher.of("delta")} == {"STOPPED"}
    assert watcher.messages[-1] == {"type": "end", "reason": "daemon stopping"}


async def test_filters_select_sessions_and_a_second_call_on_a_stream_ends_it(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 4), tmp_path) as h:
        await h.wait(lambda: len(h.runners) == 4 and h.all_in("active"))
        one = await Watcher.subscribe(
            h.subscribe, {"filter": {"sessions": ["wm-1"], "platforms": ["genesys"]}}
        )
        cxone_only = await Watcher.subscribe(h.subscribe, {"filter": {"platforms": ["cxone"]}})
        async with anyio.create_task_group() as tg:
            tg.start_soon(one.run)
            tg.start_soon(cxone_only.run)
            await drop_all_and_recover(h, genesys_sim)
            await wait_until(lambda: len(one.of("delta")) == 3)
            assert [s["sessionId"] for s in one.snapshot["sessions"]] == ["wm-1"]
            assert {d["sessionId"] for d in one.of("delta")} == {"wm-1"}
            assert cxone_only.messages == [cxone_only.snapshot] and cxone_only.snapshot["sessions"] == []
            tg.cancel_scope.cancel()
        # a stream carries replies only: another call on it is answered with an error, then closed
        conn = await Conn.open(h.subscribe)
        await conn.send(Method.SUBSCRIBE, {}, more=True)
        assert (await conn.reply()) is not None
        await conn.send(Method.GET_INFO)
        reply = await conn.reply()
        assert reply is not None and reply.error == ApiFault.STREAM_TAKES_NO_CALLS
        assert await conn.reply() is None
        await conn.aclose()


async def test_subscribe_needs_more_and_the_service_methods_answer(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path) as h:
        conn = await Conn.open(h.subscribe)
        info = await conn.call(Method.GET_INFO)
        assert "io.sessionsupervisor.state.v1" in info.parameters["interfaces"]
        description = await conn.call(
            Method.GET_INTERFACE_DESCRIPTION, {"interface": "io.sessionsupervisor.state.v1"}
        )
        assert "method Subscribe(" in description.parameters["description"]
        no_more = await conn.call(Method.SUBSCRIBE, {})
        assert no_more.error == ApiFault.EXPECTED_MORE
        control_here = await conn.call(Method.STATUS)
        assert control_here.error == ApiFault.INTERFACE_NOT_FOUND  # the control verbs are not on this socket
        bad_filter = await conn.call(Method.SUBSCRIBE, {"filter": {"states": ["asleep"]}})
        assert bad_filter.error in (ApiFault.EXPECTED_MORE, ApiFault.INVALID_PARAMETER)
        await conn.send(Method.SUBSCRIBE, {"filter": {"states": ["asleep"]}}, more=True)
        refused = await conn.reply()
        assert refused is not None and refused.error == ApiFault.INVALID_PARAMETER
        assert "unknown state 'asleep'" in refused.parameters["problem"]
        await conn.aclose()


async def test_an_idle_subscriber_on_a_quiet_daemon_stays_connected_by_design(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Idle subscribers stay (documented as designed, docs/socket-api.md "Idle subscribers").

    A subscriber that reads nothing while nothing changes holds its connection past
    laggedDisconnectAfter: it is not behind, there was nothing to read. The same subscriber is cut
    once changes pile up past its cap (test_a_subscriber_that_never_reads_is_lagged_then_cut_off_and_slows_nobody).
    """
    sockets = SocketsConfig(lagged_disconnect_after=0.05, handshake_timeout=0.5)
    async with api_daemon(genesys_config(genesys_sim.urls, 2), tmp_path, sockets=sockets) as h:
        await h.wait(lambda: len(h.runners) == 2 and h.all_in("active"))
        idle = await Conn.open(h.subscribe)
        await idle.send(Method.SUBSCRIBE, {}, more=True)
        snapshot = await idle.reply()
        assert snapshot is not None and snapshot.parameters["type"] == "snapshot"
        # ten times laggedDisconnectAfter goes by on the daemon's own timers: a connection that never
        # calls is timed out by the handshake timeout (0.5 s), and the idle subscriber is not cut
        silent = await Conn.open(h.subscribe)
        timed_out = await silent.reply()
        assert timed_out is not None and timed_out.error == ApiFault.HANDSHAKE_TIMEOUT
        await silent.aclose()
        assert h.api.hub.stats()["subscribers"] == 1 and h.api.hub.lag_disconnects == 0
        assert h.recorded.named("SUBSCRIBER_DISCONNECTED") == []
        # and it is still served: the next change reaches it
        control = await Conn.open(h.control)
        assert (await control.call(Method.STOP_SESSION, {"sessionId": "wm-1"})).error is None
        await control.aclose()
        delta = await idle.reply()
        assert delta is not None and (delta.parameters["type"], delta.parameters["sessionId"]) == (
            "delta",
            "wm-1",
        )
        await idle.aclose()
