"""The protocol's limits on live sockets: the handshake timeout and the connection cap (docs/socket-api.md)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.api.client import Client
from supervisor.api.connection import Connection, UnixService
from supervisor.api.listen import AccessPolicy
from supervisor.api.protocol import ApiFault, Method
from supervisor.config import SocketsConfig
from supervisor.errors import ApiError, ApiUnavailable
from supervisor.events import Event
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import genesys_config, short_dir
from tests.harness.waits import wait_until
from tests.integration.api_harness import Conn, api_daemon

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=8)]


async def test_a_client_that_never_calls_is_timed_out(genesys_sim: GenesysSimulator, tmp_path: Path) -> None:
    sockets = SocketsConfig(handshake_timeout=0.2)
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path, sockets=sockets) as h:
        for path in (h.subscribe, h.control):
            silent = await Conn.open(path)
            reply = await silent.reply()  # the daemon's answer, whenever its timer fires
            assert reply is not None and reply.error == ApiFault.HANDSHAKE_TIMEOUT
            assert reply.parameters["seconds"] == 0.2
            assert await silent.reply() is None  # then closed
            await silent.aclose()


async def test_past_the_connection_cap_a_client_is_told_and_closed(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    sockets = SocketsConfig(max_connections=2)
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path, sockets=sockets) as h:
        held = [await Conn.open(h.control) for _ in range(2)]
        for conn in held:  # both are in: they answer
            assert (await conn.call(Method.GET_INFO)).error is None
        third = await Conn.open(h.control)
        reply = await third.reply()
        assert reply is not None and reply.error == ApiFault.TOO_MANY_CONNECTIONS
        assert reply.parameters["limit"] == 2 and await third.reply() is None
        await third.aclose()
        await held[0].aclose()
        # a slot is free again once the daemon has seen one leave
        assert h.api.control is not None
        control = h.api.control
        await wait_until(lambda: control.active == 1)
        again = await Conn.open(h.control)
        assert (await again.call(Method.GET_INFO)).error is None
        await again.aclose()
        await held[1].aclose()
        status_conn = await Conn.open(h.control)
        status = (await status_conn.call(Method.STATUS)).parameters
        await status_conn.aclose()
        assert status["sockets"]["control"]["overCapacity"] >= 1


async def test_control_connections_idle_after_their_last_answer_are_closed_and_free_their_slots(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Formerly 128 connections that asked once and then said nothing held every slot."""
    sockets = SocketsConfig(max_connections=2, control_idle_timeout=0.3)
    async with api_daemon(genesys_config(genesys_sim.urls, 1), tmp_path, sockets=sockets) as h:
        held = [await Conn.open(h.control) for _ in range(2)]
        for conn in held:
            assert (await conn.call(Method.GET_INFO)).error is None
        for conn in held:  # then silence: each is told, whenever the daemon's timer fires, and closed
            reply = await conn.reply()
            assert reply is not None and reply.error == ApiFault.IDLE_TIMEOUT
            assert reply.parameters["seconds"] == 0.3 and await conn.reply() is None
            await conn.aclose()
        assert h.api.control is not None
        control = h.api.control
        await wait_until(lambda: control.active == 0)
        # the slots are free: two new clients are served, not refused TooManyConnections
        again = [await Conn.open(h.control) for _ in range(2)]
        for conn in again:
            assert (await conn.call(Method.STATUS)).error is None
            await conn.aclose()
        assert control.over_capacity == 0


@pytest.fixture
def closing_listener() -> Iterator[Path]:
    """A socket that accepts and closes at once, as the peer check does with a refused uid."""
    with short_dir() as directory:
        path = directory / "refuse.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(4)

        def refuse() -> None:
            for _ in range(2):
                conn, _ = listener.accept()
                conn.close()

        thread = threading.Thread(target=refuse, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            listener.close()
            thread.join(5)


def test_the_client_says_in_one_line_when_the_daemon_closed_without_answering(closing_listener: Path) -> None:
    for attempt in (
        lambda c: c.call(Method.STATUS),
        lambda c: next(iter(c.stream(Method.SUBSCRIBE, {}, first_timeout=5))),
    ):
        with Client(closing_listener, timeout=5) as client, pytest.raises(ApiUnavailable) as refused:
            attempt(client)
        message = str(refused.value)
        assert "closed the connection without answering" in message and "allowUids" in message
        assert "\n" not in message


async def test_a_bug_in_the_daemon_is_answered_as_one_not_blamed_on_the_peer_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler that raises: the client gets InternalError (before, zero bytes: `ctl` blamed allowUids)."""
    published: list[Event] = []

    async def broken(connection: Connection) -> None:
        await connection.receive()
        raise RuntimeError("a bug")

    with short_dir() as directory:
        path = directory / "control.sock"
        service = UnixService(
            "control",
            path,
            mode=0o600,
            policy=AccessPolicy(frozenset({os.getuid()}), frozenset()),
            handler=broken,
            max_connections=4,
            publish=published.append,
            timestamp=lambda: "2026-01-01T00:00:00.000Z",
        )
        async with anyio.create_task_group() as tg:
            await tg.start(service.serve)

            def call() -> ApiError:
                with Client(path, timeout=10) as client, pytest.raises(ApiError) as failed:
                    client.call(Method.STATUS)
                return failed.value

            error = await anyio.to_thread.run_sync(call)
            tg.cancel_scope.cancel()
    assert error.name == ApiFault.INTERNAL_ERROR and "its log has the details" in str(error)
    assert service.internal_errors == 1 and service.stats()["internalErrors"] == 1
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError]
