"""Fuzzed and malformed input on both sockets never crashes the daemon or reaches another client (docs/socket-api.md).

The daemon (against the Genesys simulator) runs on an event loop in its own thread, so that
hypothesis can drive plain blocking sockets against it: every example opens a connection,
sends its bytes, half-closes, and reads until the daemon closes. Every byte the daemon sends
back must be well-formed replies; afterwards the daemon must still answer, and a subscriber
that has been reading the whole time must still be streaming.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.api.protocol import MAX_MESSAGE_BYTES, ApiFault, Method, encode_call, parse_reply
from supervisor.sim.genesys import GenesysSimulator
from tests import strategies
from tests.harness.config import genesys_config
from tests.harness.in_process import Harness
from tests.integration.api_harness import api_daemon

pytestmark = pytest.mark.integration

KNOWN_METHODS = [m.value for m in Method]
SESSIONS = 3


@dataclass
class Sentinel:
    """A subscriber reading the stream on its own thread for the whole module."""

    sock: socket.socket
    messages: list[dict[str, Any]] = field(default_factory=list)
    ended: str | None = None

    def run(self) -> None:
        buffer = b""
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError as exc:
                self.ended = f"error {exc}"
                return
            if not data:
                self.ended = "closed"
                return
            *frames, buffer = (buffer + data).split(b"\0")
            for frame in frames:
                reply = parse_reply(frame)
                if reply.error is not None:
                    self.ended = f"error reply {reply.error}"
                    return
                self.messages.append(reply.parameters)


@dataclass
class Live:
    h: Harness
    sentinel: Sentinel


@asynccontextmanager
async def live_daemon(tmp: Path) -> AsyncIterator[Harness]:
    async with (
        GenesysSimulator(seed=13) as sim,
        api_daemon(genesys_config(sim.urls, SESSIONS), tmp) as h,
    ):
        await h.wait(lambda: len(h.runners) == SESSIONS and h.all_in("active"))
        yield h


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with (
        start_blocking_portal(backend="asyncio") as portal,
        portal.wrap_async_context_manager(live_daemon(tmp_path_factory.mktemp("fuzz"))) as h,
    ):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(h.subscribe))
        sock.sendall(encode_call(Method.SUBSCRIBE, {"streams": ["control"]}, more=True))
        sentinel = Sentinel(sock)
        reader = threading.Thread(target=sentinel.run, daemon=True)
        reader.start()
        try:
            yield Live(h, sentinel)
        finally:
            # shutdown wakes the reader thread's blocking recv (close alone does not)
            sock.shutdown(socket.SHUT_RDWR)
            reader.join(10)
            sock.close()


def exchange(path: Path, payload: bytes) -> list[dict[str, Any]]:
    """Send ``payload``, half-close, read replies until the daemon closes: each must parse."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.connect(str(path))
    received = bytearray()
    writer = threading.Thread(target=_send_then_half_close, args=(sock, payload), daemon=True)
    writer.start()
    try:
        while True:
            try:
                data = sock.recv(1 << 16)
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
    finally:
        writer.join(20)
        sock.close()
    assert received.endswith(b"\0") or not received, "replies are whole messages"
    replies = []
    for frame in bytes(received).split(b"\0")[:-1]:
        reply = parse_reply(frame)
        replies.append({"error": reply.error, "parameters": reply.parameters, "continues": reply.continues})
    return replies


def _send_then_half_close(sock: socket.socket, payload: bytes) -> None:
    try:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the daemon closed first (a message too large): what it said is still read


def still_serving(live: Live) -> None:
    """The daemon answers a new client, no connection ever failed inside it, the sentinel still reads."""
    status = exchange(live.h.control, encode_call(Method.STATUS))
    assert status[0]["error"] is None and status[0]["parameters"]["sessions"]["total"] == SESSIONS
    api = live.h.api
    assert api.subscribe is not None and api.control is not None
    assert api.subscribe.internal_errors == 0 and api.control.internal_errors == 0
    assert live.sentinel.ended is None


json_values = strategies.json_values(max_leaves=25, max_text=30)
calls = st.fixed_dictionaries(
    {"method": st.sampled_from(KNOWN_METHODS) | strategies.text(max_size=40)},
    optional={"parameters": json_values, "more": json_values, "oneway": st.booleans(), "x": json_values},
)
frames = st.one_of(
    calls.map(msgspec.json.encode),  # well-formed JSON, any shape of call
    st.binary(max_size=300).map(lambda b: b.replace(b"\0", b"")),  # anything at all
    st.just(b"\xff\xfe\xfd"),  # not UTF-8
    st.just(b'{"method": "io.sessionsupervisor.control.v1.Status"'),  # truncated JSON
    st.just(b"[" * 5000),  # deep nesting, never closed
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(frames, max_size=8), terminated=st.booleans(), control=st.booleans())
def test_any_sequence_of_messages_gets_well_formed_answers(
    live: Live, messages: list[bytes], terminated: bool, control: bool
) -> None:
    path = live.h.control if control else live.h.subscribe
    payload = b"\0".join(messages) + (b"\0" if terminated and messages else b"")
    replies = exchange(path, payload)
    for reply in replies:
        assert reply["error"] is None or reply["error"].startswith(
            ("org.varlink.service.", "io.sessionsupervisor.")
        )
    still_serving(live)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(min_size=1, max_size=4000), control=st.booleans())
def test_arbitrary_bytes_never_break_anything(live: Live, data: bytes, control: bool) -> None:
    exchange(live.h.control if control else live.h.subscribe, data)
    still_serving(live)


@pytest.mark.parametrize("control", [True, False])
def test_an_oversized_message_is_refused_and_the_connection_closed(live: Live, control: bool) -> None:
    replies = exchange(live.h.control if control else live.h.subscribe, b"x" * (MAX_MESSAGE_BYTES + 10))
    assert [r["error"] for r in replies] == [ApiFault.MESSAGE_TOO_LARGE]
    assert replies[0]["parameters"]["limit"] == MAX_MESSAGE_BYTES
    still_serving(live)


def test_ten_thousand_pipelined_calls_are_answered_in_order(live: Live) -> None:
    kinds = [
        Method.STATUS,
        Method.GET_INFO,
        Method.LIST_SESSIONS,
        "io.sessionsupervisor.control.v1.Nope",
        None,
    ]
    payload = bytearray()
    for i in range(10_000):
        kind = kinds[i % len(kinds)]
        payload += encode_call(kind) if kind is not None else b"{not json}\0"
    replies = exchange(live.h.control, bytes(payload))
    assert len(replies) == 10_000
    for i, reply in enumerate(replies):
        kind = kinds[i % len(kinds)]
        if kind == Method.STATUS:
            assert reply["parameters"]["sessions"]["total"] == SESSIONS
        elif kind == Method.GET_INFO:
            assert "io.sessionsupervisor.control.v1" in reply["parameters"]["interfaces"]
        elif kind == Method.LIST_SESSIONS:
            assert len(reply["parameters"]["sessions"]) == SESSIONS
        elif kind is None:
            assert reply["error"] == ApiFault.INVALID_MESSAGE
        else:
            assert reply["error"] == ApiFault.METHOD_NOT_FOUND
    still_serving(live)


def test_the_sentinel_saw_the_stream_all_along(live: Live) -> None:
    """Last: a control verb's event still reaches the subscriber that read through every test above."""
    before = len(live.sentinel.messages)
    replies = exchange(live.h.control, encode_call(Method.STOP_SESSION, {"sessionId": "nope"}))
    assert replies[0]["error"] == ApiFault.NO_SUCH_SESSION
    deadline = threading.Event()
    for _ in range(200):
        if len(live.sentinel.messages) > before:
            break
        deadline.wait(0.05)  # polling another thread's progress, not waiting for a timer
    assert live.sentinel.messages[0]["type"] == "snapshot"
    assert live.sentinel.messages[-1]["event"] == "CONTROL_COMMAND"
    assert live.sentinel.ended is None
