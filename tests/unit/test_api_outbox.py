"""A subscriber's outbox (supervisor/api/outbox.py): in order, conflated only while backlogged, capped.

The property test plays random transitions, events, writer takes and socket push-back against
one outbox, decodes what a reader would get, and checks the reader's picture of every session
stays exact: each delta leaves from the state the reader last saw, seq rises, nothing is lost
silently (a lag says how many and a snapshot follows), and the bytes held never pass the cap.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from supervisor.api.messages import Delta, encode_message
from supervisor.api.outbox import Outbox

STATES = ("connecting", "active", "reconnecting", "terminated")
SESSIONS = ("s0", "s1", "s2")


class World:
    """The daemon side: global session states, the bus seq, and snapshots of them."""

    def __init__(self) -> None:
        self.seq = 0
        self.states = dict.fromkeys(SESSIONS, "connecting")

    def transition(self, session: str, target: str) -> Delta:
        self.seq += 1
        previous, self.states[session] = self.states[session], target
        return Delta(self.seq, session, target, previous, "2026-01-01T00:00:00.000Z", "TEST", {})

    def event(self) -> bytes:
        self.seq += 1
        return encode_message({"type": "event", "event": "RETRY_ATTEMPT", "seq": self.seq})

    def snapshot(self) -> bytes:
        sessions = [{"sessionId": s, "state": state} for s, state in self.states.items()]
        return encode_message({"type": "snapshot", "seq": self.seq, "sessions": sessions})


class Reader:
    """The client side: what it believes, checked message by message."""

    def __init__(self) -> None:
        self.view: dict[str, str] = {}
        self.last_seq = -1
        self.expect_snapshot = True
        self.deltas: list[int] = []
        self.lost = 0

    def read(self, frames: list[bytes]) -> None:
        for frame in frames:
            assert frame.endswith(b"\0")
            message: dict[str, Any] = msgspec.json.decode(frame[:-1])["parameters"]
            kind = message["type"]
            if self.expect_snapshot:
                assert kind == "snapshot", "after a lag (and at the start) a snapshot comes first"
                self.expect_snapshot = False
            if kind == "snapshot":
                self.view = {s["sessionId"]: s["state"] for s in message["sessions"]}
                self.last_seq = message["seq"]
            elif kind == "lagged":
                assert message["count"] > 0
                self.lost += message["count"]
                self.expect_snapshot = True
            else:
                assert message["seq"] > self.last_seq, "seq rises on the stream"
                self.last_seq = message["seq"]
                if kind == "delta":
                    assert message["previous"] == self.view[message["sessionId"]], (
                        "a delta leaves from what we saw"
                    )
                    self.view[message["sessionId"]] = message["state"]
                    self.deltas.append(message["seq"])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("transition"), st.sampled_from(SESSIONS), st.sampled_from(STATES)),
        st.tuples(st.just("event"), st.none(), st.none()),
        st.tuples(st.just("take"), st.none(), st.none()),
        st.tuples(st.just("backlog"), st.booleans(), st.none()),
    ),
    max_size=120,
)


@given(ops=ops, cap=st.integers(min_value=300, max_value=3000))
def test_a_reader_always_sees_the_truth(ops: list[tuple[str, Any, Any]], cap: int) -> None:
    world = World()
    lags: list[int] = []
    outbox = Outbox(cap, world.snapshot, lambda: lags.append(world.seq))
    outbox.start(world.snapshot())
    reader = Reader()
    transitions: list[int] = []
    for op, a, b in ops:
        if op == "transition":
            delta = world.transition(a, b)
            transitions.append(delta.seq)
            outbox.push_delta(delta)
        elif op == "event":
            outbox.push_frame(world.event())
        elif op == "take":
            lagged_before = outbox.lagged
            frames, recovery = outbox.take()
            assert recovery == lagged_before
            reader.read(frames)
        else:
            outbox.backlogged = a
        # the daemon's memory for this subscriber: never past the cap (one message's worth at most)
        assert outbox.pending_bytes <= cap
    outbox.backlogged = False
    reader.read(outbox.take()[0])
    assert reader.view == world.states, "after the last take the reader's picture is exact"
    assert len(lags) == outbox.lags
    if not lags and outbox.conflated == 0:
        assert reader.deltas == transitions, "a reader that kept up saw every transition"


def delta(seq: int, session: str, state: str, previous: str) -> Delta:
    return Delta(seq, session, state, previous, "t", "R", {})


def decoded(frames: list[bytes]) -> list[dict[str, Any]]:
    return [msgspec.json.decode(f[:-1])["parameters"] for f in frames]


def test_while_the_writer_keeps_up_every_transition_is_kept() -> None:
    outbox = Outbox(1 << 20, lambda: b"")
    for seq, (prev, state) in enumerate([("active", "reconnecting"), ("reconnecting", "connecting")], 1):
        outbox.push_delta(delta(seq, "s", state, prev))
    frames, recovery = outbox.take()
    assert not recovery
    assert [(m["previous"], m["state"]) for m in decoded(frames)] == [
        ("active", "reconnecting"),
        ("reconnecting", "connecting"),
    ]


def test_while_backlogged_a_session_keeps_one_pending_delta_from_what_was_seen() -> None:
    outbox = Outbox(1 << 20, lambda: b"")
    outbox.backlogged = True
    outbox.push_delta(delta(1, "s", "reconnecting", "active"))
    outbox.push_delta(delta(2, "t", "reconnecting", "active"))
    outbox.push_delta(delta(3, "s", "connecting", "reconnecting"))
    messages = decoded(outbox.take()[0])
    # t first (seq 2), then s's merged delta (seq 3) leaving from the state the reader saw
    assert [(m["sessionId"], m["seq"], m["previous"], m["state"]) for m in messages] == [
        ("t", 2, "active", "reconnecting"),
        ("s", 3, "active", "connecting"),
    ]
    assert outbox.conflated == 1


def test_past_the_cap_everything_pending_is_dropped_counted_and_a_snapshot_follows() -> None:
    snapshots = iter([encode_message({"type": "snapshot", "seq": 9, "sessions": []})])
    lagged: list[bool] = []
    outbox = Outbox(4096, lambda: next(snapshots), lambda: lagged.append(True))
    frame = encode_message({"type": "event", "pad": "x" * 1000})
    for _ in range(5):
        outbox.push_frame(frame)
    assert outbox.lagged and lagged == [True] and outbox.pending_bytes == 0
    outbox.push_frame(frame)  # while lagged: counted only
    frames, recovery = outbox.take()
    assert recovery
    assert decoded(frames) == [{"type": "lagged", "count": 6}, {"type": "snapshot", "seq": 9, "sessions": []}]
    outbox.push_frame(frame)
    assert decoded(outbox.take()[0])[0]["pad"] == "x" * 1000


def test_a_lag_before_the_first_snapshot_left_sends_a_fresh_snapshot_only() -> None:
    """The reader had nothing yet: no "lagged" notice, the first message is still a snapshot."""
    fresh = encode_message({"type": "snapshot", "seq": 5, "sessions": []})
    outbox = Outbox(4096, lambda: fresh)
    outbox.start(encode_message({"type": "snapshot", "seq": 1, "sessions": []}))
    for _ in range(5):
        outbox.push_frame(encode_message({"type": "event", "pad": "x" * 1000}))
    frames, recovery = outbox.take()
    assert recovery and decoded(frames) == [{"type": "snapshot", "seq": 5, "sessions": []}]
