"""The state board follows the bus (supervisor/api/board.py): rows, deltas, and the start verb's reset."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.board import StateBoard
from supervisor.api.connection import Connection
from supervisor.api.events import ControlCommand, Peer
from supervisor.api.fanout import Hub, Subscriber
from supervisor.api.messages import Subscription, encode_message, parse_subscription
from supervisor.api.outbox import RUN_BYTES
from supervisor.api.platform_events import PlatformEvents
from supervisor.bus import EventBus
from supervisor.clock import FakeClock
from supervisor.config import parse_config
from supervisor.events import (
    CircuitOpened,
    Correlation,
    ErrorClassified,
    Published,
    RetryAttempt,
    RetryKind,
    SessionTransition,
)
from supervisor.runtime.supervisor import Supervisor
from supervisor.runtime.wiring import Wiring
from supervisor.taxonomy import Channel, Platform, RawError
from supervisor.vocabulary import GENESYS_WEBMESSAGING, EndpointId, SessionState

pytestmark = pytest.mark.anyio

CONFIG = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:9"
apiUrl = "http://127.0.0.1:9"
webmessagingUrl = "ws://127.0.0.1:9"
deploymentId = "dep"
[[sessions]]
id = "wm-0"
platform = "genesys"
kind = "webmessaging"
agentId = "a-0"
"""


async def test_rows_follow_transitions_attempts_errors_and_a_restart(tmp_path: Path) -> None:
    clock = FakeClock(start=10.0)
    bus = EventBus()
    async with Wiring(parse_config(CONFIG, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        supervisor = Supervisor(wiring)
        board = StateBoard(supervisor.sessions, wiring.circuits, clock, boot_id=bus.boot_id)
        changes: list[tuple[Published, object]] = []
        board.on_change = lambda published, delta: changes.append((published, delta))
        bus.subscribe(board)
        correlation = Correlation("wm-0", agent_id="a-0", conversation_id="c-1")
        # heard of first through a transition: the row starts where the move began
        bus.publish(
            SessionTransition(
                "wm-0", SessionState.CONNECTING, SessionState.ACTIVE, "validated", "VALIDATED", "t1"
            ),
            correlation,
        )
        delta = changes[-1][1]
        assert delta is not None and (delta.previous, delta.state, delta.seq) == ("connecting", "active", 1)  # type: ignore[attr-defined]
        bus.publish(
            SessionTransition(
                "wm-0", SessionState.ACTIVE, SessionState.RECONNECTING, "lost", "ABNORMAL_CLOSURE", "t2"
            ),
            correlation,
        )
        bus.publish(
            RetryAttempt("wm-0", RetryKind.RECONNECT, 1, 0.5, "ABNORMAL_CLOSURE", "network", "t2"),
            correlation,
        )
        event = wiring.classifier.classify(
            RawError(
                platform=Platform.GENESYS,
                channel=Channel.WEBMESSAGING,
                close_code=1006,
                context={"sessionId": "wm-0"},
            )
        )
        bus.publish(ErrorClassified(event))
        row = board.row("wm-0")
        assert row is not None
        assert (row.state, row.since, row.attempts, row.conversation_id) == ("reconnecting", "t2", 1, "c-1")
        assert row.last_error is not None and row.last_error["code"] == "ABNORMAL_CLOSURE"
        assert str(row.endpoint) == "genesys:webmessaging"
        snapshot = board.snapshot(Subscription())
        assert snapshot["seq"] == 4 and snapshot["bootId"] == bus.boot_id
        assert snapshot["sessions"][0]["circuit"] == {"endpoint": "genesys:webmessaging", "state": "closed"}
        # a start through the control socket: a fresh row (nothing carried over), and a delta saying so
        bus.publish(ControlCommand("start", Peer(1, 0, 0), True, "t3", session_id="wm-0"))
        delta = changes[-1][1]
        assert (delta.previous, delta.reason, delta.at) == ("reconnecting", "STARTED", "t3")  # type: ignore[attr-defined]
        fresh = board.row("wm-0")
        assert fresh is not None and (fresh.attempts, fresh.last_error, fresh.since) == (0, None, "t3")
        assert board.row("nope") is None
        await anyio.lowlevel.checkpoint()


async def test_circuit_events_reach_the_subscribers_of_their_endpoint_by_platform_and_session() -> None:
    """A circuit event is matched by its endpoint (the board looks the circuit up), not by a parsed id."""
    clock = FakeClock()
    bus = EventBus()
    async with Wiring(parse_config(CONFIG, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        supervisor = Supervisor(wiring)
        cxone_api = EndpointId.api(Platform.CXONE)
        for endpoint in (GENESYS_WEBMESSAGING, cxone_api):
            wiring.circuits.get(endpoint)
        board = StateBoard(supervisor.sessions, wiring.circuits, clock, boot_id=bus.boot_id)
        hub = Hub(board, publish=bus.publish, timestamp=lambda: "t")
        states = [s.value for s in SessionState]
        ours, theirs = socket.socketpair(socket.AF_UNIX)
        with ours, theirs:
            subscribers = {}
            for name, selection in (
                ("genesys", {"platforms": ["genesys"]}),
                ("cxone", {"platforms": ["cxone"]}),
                ("wm-0", {"sessions": ["wm-0"]}),
            ):
                subscription = parse_subscription(
                    {"filter": selection, "streams": ["circuits"]}, known_states=states
                )
                subscriber = Subscriber(
                    Connection(ours, Peer(0, 0, 0)),
                    subscription,
                    cap_bytes=1 << 20,
                    lagged_disconnect_after=5.0,
                    snapshot=hub.snapshot_frame,
                )
                hub.add(subscriber)
                subscriber.outbox.take()  # the snapshot
                subscribers[name] = subscriber
            bus.subscribe(board)
            for endpoint in (GENESYS_WEBMESSAGING, cxone_api):
                bus.publish(CircuitOpened(endpoint.circuit_id, "THRESHOLD", 5, 30.0, 1, timestamp="t"))

            def circuits_seen(name: str) -> list[str]:
                frames, _ = subscribers[name].outbox.take()
                return [json.loads(frame.rstrip(b"\0"))["parameters"]["circuitId"] for frame in frames]

            assert circuits_seen("genesys") == ["circuit:genesys:webmessaging"]
            assert circuits_seen("cxone") == ["circuit:cxone:api"]
            # wm-0 connects through genesys:webmessaging (the session table says)
            assert circuits_seen("wm-0") == ["circuit:genesys:webmessaging"]


async def test_platform_records_reach_exactly_the_subscribers_whose_filters_pass_them_and_none_once_gone() -> (
    None
):
    """The fan-out's index (by session, and the subscribers of every session) sends a record to those
    that watch its session or every session, with their other filters applied; a subscriber removed
    gets nothing more, and the others keep getting theirs."""
    clock = FakeClock()
    bus = EventBus()
    async with Wiring(parse_config(CONFIG, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        supervisor = Supervisor(wiring)
        board = StateBoard(supervisor.sessions, wiring.circuits, clock, boot_id=bus.boot_id)
        events = PlatformEvents(boot_id=bus.boot_id, clock=clock)
        hub = Hub(board, publish=bus.publish, timestamp=lambda: "t", platform=events)
        states = [s.value for s in SessionState]
        ours, theirs = socket.socketpair(socket.AF_UNIX)
        with ours, theirs:
            subscribers: dict[str, Subscriber] = {}
            for name, selection in (
                ("every", {}),
                ("cx-1", {"sessions": ["cx-1"]}),
                ("cx-1 too", {"sessions": ["cx-1", "cx-3"]}),
                ("cx-2", {"sessions": ["cx-2"]}),
                ("cx-2 states", {"sessions": ["cx-2"], "eventTypes": ["AgentState"]}),
                ("not platform", {"sessions": ["cx-1"]}),
            ):
                streams = [] if name == "not platform" else ["platform"]
                subscription = parse_subscription(
                    {"filter": selection, "streams": streams}, known_states=states
                )
                subscriber = Subscriber(
                    Connection(ours, Peer(0, 0, 0)),
                    subscription,
                    cap_bytes=1 << 20,
                    lagged_disconnect_after=5.0,
                    snapshot=hub.snapshot_frame,
                )
                hub.add(subscriber)
                subscriber.outbox.take()  # the snapshot
                subscribers[name] = subscriber

            def seen(name: str) -> list[tuple[str, str | None]]:
                frames, _ = subscribers[name].outbox.take()
                out = []
                # a run of records shared by the subscribers of every record is one write of several frames
                for frame in b"".join(frames).split(b"\0")[:-1]:
                    parameters = json.loads(frame)["parameters"]
                    out.append((parameters["sessionId"], parameters.get("eventType", parameters["type"])))
                return out

            for session_id, event_type in (
                ("cx-1", "AgentState"),
                ("cx-2", "ContactEvent"),
                ("cx-2", "AgentState"),
            ):
                events.delivered(session_id, "cxone", event_type, {}, {})
            start_1, start_2 = ("cx-1", "gap"), ("cx-2", "gap")
            assert seen("every") == [
                start_1,
                ("cx-1", "AgentState"),
                start_2,
                ("cx-2", "ContactEvent"),
                ("cx-2", "AgentState"),
            ]
            assert seen("cx-1") == [start_1, ("cx-1", "AgentState")]
            assert seen("cx-1 too") == [start_1, ("cx-1", "AgentState")]
            assert seen("cx-2") == [start_2, ("cx-2", "ContactEvent"), ("cx-2", "AgentState")]
            # a gap is never hidden by the event-type filter
            assert seen("cx-2 states") == [start_2, ("cx-2", "AgentState")]
            assert seen("not platform") == []
            events.delivered("cx-3", "cxone", "AgentState", {}, {})
            assert seen("cx-1 too") == seen("every") == [("cx-3", "gap"), ("cx-3", "AgentState")]
            assert seen("cx-1") == seen("cx-2") == []
            hub.remove(subscribers["cx-1"])
            hub.remove(subscribers["every"])
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            assert seen("cx-1") == seen("every") == []
            assert seen("cx-1 too") == [("cx-1", "AgentState")]


def _platform_hub(wiring: Wiring, bus: EventBus, clock: FakeClock) -> tuple[Hub, PlatformEvents]:
    board = StateBoard(Supervisor(wiring).sessions, wiring.circuits, clock, boot_id=bus.boot_id)
    events = PlatformEvents(boot_id=bus.boot_id, clock=clock)
    return Hub(board, publish=bus.publish, timestamp=lambda: "t", platform=events), events


def _every_record(hub: Hub, sock: socket.socket, cap_bytes: int = 1 << 20) -> Subscriber:
    subscription = parse_subscription({"streams": ["platform"]}, known_states=[s.value for s in SessionState])
    subscriber = Subscriber(
        Connection(sock, Peer(0, 0, 0)),
        subscription,
        cap_bytes=cap_bytes,
        lagged_disconnect_after=5.0,
        snapshot=hub.snapshot_frame,
        lagged_gap=None if hub.platform is None else hub.platform.lagged_gap,
    )
    hub.add(subscriber)
    subscriber.outbox.take()  # the snapshot
    return subscriber


def _messages(subscriber: Subscriber) -> list[dict[str, Any]]:
    frames, _ = subscriber.outbox.take()
    return [json.loads(f)["parameters"] for f in b"".join(frames).split(b"\0")[:-1]]


async def test_subscribers_of_every_record_share_runs_and_each_gets_every_record_once_in_push_order() -> None:
    """A run of records shared by the subscribers of every record takes the records that follow only
    while it is every holder's last item: a message pushed to one of them, or a writer's take, seals
    it and the next record opens a new run."""
    clock = FakeClock()
    bus = EventBus()
    async with Wiring(parse_config(CONFIG, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        hub, events = _platform_hub(wiring, bus, clock)
        ours, theirs = socket.socketpair(socket.AF_UNIX)
        with ours, theirs:
            a, b = _every_record(hub, ours), _every_record(hub, ours)

            def records(subscriber: Subscriber) -> list[object]:
                return [m.get("sessionSeq", m["type"]) for m in _messages(subscriber)]

            for _ in range(3):
                events.delivered("cx-1", "cxone", "AgentState", {}, {})
            a.outbox.push_frame(encode_message({"type": "event", "name": "X"}))
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            assert records(a) == ["gap", 1, 2, 3, "event", 4]
            assert a.outbox.taken == 6  # a run counts as the records it holds
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            assert records(b) == ["gap", 1, 2, 3, 4, 5]
            assert records(a) == [5]
            # one that comes later gets what follows it, and the others lose nothing meanwhile
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            c = _every_record(hub, ours)
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            assert records(a) == records(b) == [6, 7]
            assert records(c) == [7]
            hub.remove(a)
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            assert records(a) == []
            assert records(b) == records(c) == [8]


async def test_a_subscriber_of_every_record_that_lags_is_told_each_record_it_lost_while_the_others_get_them() -> (
    None
):
    clock = FakeClock()
    bus = EventBus()
    async with Wiring(parse_config(CONFIG, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        hub, events = _platform_hub(wiring, bus, clock)
        ours, theirs = socket.socketpair(socket.AF_UNIX)
        with ours, theirs:
            events.delivered("cx-1", "cxone", "AgentState", {}, {})  # its start-up gap and record 1
            size = events.total_bytes // 2  # the gap's and record 1's frames: about one record's each
            slow, fast = _every_record(hub, ours, cap_bytes=3 * size), _every_record(hub, ours)
            taken: list[int] = []
            for _ in range(9):  # records 2..10: the slow one's outbox goes over its cap on the way
                events.delivered("cx-1", "cxone", "AgentState", {}, {})
                if not slow.outbox.lagged:
                    # the fast writer keeps up (every record opens a new run) until the slow one lags;
                    # then a record lost by the lagged one must not ride an open run unseen
                    taken += [m["sessionSeq"] for m in _messages(fast)]
            assert slow.outbox.lagged and len(taken) < 9
            assert taken + [m["sessionSeq"] for m in _messages(fast)] == list(range(2, 11))
            lagged, _snapshot, gap = _messages(slow)
            assert lagged == {"type": "lagged", "count": 9}
            assert (gap["type"], gap["reason"], gap["fromSeq"], gap["toSeq"]) == ("gap", "lagged", 2, 10)
            events.delivered("cx-1", "cxone", "AgentState", {}, {})
            assert [m["sessionSeq"] for m in _messages(slow)] == [11]
            assert [m["sessionSeq"] for m in _messages(fast)] == [11]


async def test_records_appended_to_a_shared_run_count_against_the_cap_of_a_subscriber_that_never_reads() -> (
    None
):
    """The runs seal at RUN_BYTES and charge their holders what was appended to them: a subscriber
    of every record that never reads lags within its cap plus one run, as any other would."""
    clock = FakeClock()
    bus = EventBus()
    async with Wiring(parse_config(CONFIG, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        hub, events = _platform_hub(wiring, bus, clock)
        ours, theirs = socket.socketpair(socket.AF_UNIX)
        with ours, theirs:
            cap = 16 * 1024
            stuck, other = (
                _every_record(hub, ours, cap_bytes=cap),
                _every_record(hub, ours, cap_bytes=1 << 30),
            )
            sizes: list[int] = []
            events.listen(lambda record: sizes.append(len(record.frame)))
            while sum(sizes) <= cap + RUN_BYTES:
                events.delivered("cx-1", "cxone", "AgentState", {"text": "x" * 200}, {})
                assert stuck.outbox.pending_bytes <= cap + RUN_BYTES
            assert stuck.outbox.lagged and not other.outbox.lagged
            assert other.outbox.pending_bytes >= sum(sizes) - RUN_BYTES


THREE = CONFIG + "".join(
    f'[[sessions]]\nid = "{sid}"\nplatform = "genesys"\nkind = "webmessaging"\n' for sid in ("wm-1", "wm-2")
)


def _walked(board: StateBoard) -> tuple[int, dict[str, int]]:
    rows = board.rows()
    return len(rows), dict(Counter(row.wire_state for row in rows))


async def test_the_counts_by_state_are_those_of_the_rows_through_seeds_moves_and_restarts() -> None:
    clock = FakeClock(start=10.0)
    bus = EventBus()
    async with Wiring(parse_config(THREE, "t.toml"), bus=bus, clock=clock, environ={}) as wiring:
        supervisor = Supervisor(wiring)
        board = StateBoard(supervisor.sessions, wiring.circuits, clock, boot_id=bus.boot_id)
        bus.subscribe(board)
        specs = {spec.id: spec for spec in supervisor.sessions.config.sessions}
        # two runners the bus has not spoken of yet: counted (seeded) without a row walked for them
        for sid in ("wm-1", "wm-2"):
            supervisor.sessions.put(wiring.runner_for(specs[sid]))
        assert board.counts() == (2, {"connecting": 2})
        # one heard of first through a transition (no runner), one moving, one moving twice
        moves = [
            ("wm-0", SessionState.CONNECTING, SessionState.ACTIVE),
            ("wm-1", SessionState.CONNECTING, SessionState.ACTIVE),
            ("wm-2", SessionState.CONNECTING, SessionState.ACTIVE),
            ("wm-2", SessionState.ACTIVE, SessionState.RECONNECTING),
        ]
        for sid, source, target in moves:
            bus.publish(SessionTransition(sid, source, target, "r", "R", "t1"), Correlation(sid))
            assert board.counts() == _walked(board)
        assert board.counts() == (3, {"active": 2, "reconnecting": 1})
        # a start through the control socket replaces a row: counted once, in its fresh state
        bus.publish(ControlCommand("start", Peer(1, 0, 0), True, "t2", session_id="wm-2"))
        assert board.counts() == _walked(board) == (3, {"active": 2, "connecting": 1})
        await anyio.lowlevel.checkpoint()
