"""WebSocket helpers shared by the Genesys transports (Web Messaging and notifications).

Frames, scrubbing, closing and aborting, and :func:`serve_alive`: a receive loop run beside an
application-level liveness probe (Web Messaging ``echo``, notifications ``ping``), whose silence
aborts the link: no close frame arrived, so RFC 6455 section 7.1.5 calls it 1006.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection
from websockets.protocol import State

from supervisor.boundary import (
    SOCKET_CLOSED,
    SOCKET_FAILURES,
    Reporter,
    SessionContext,
    raw_from_close,
    raw_from_exception,
)
from supervisor.config import Keepalive
from supervisor.taxonomy import RawError
from supervisor.vocabulary import CloseCode

_REDACTED = "***"


def decode_frame(frame: str | bytes) -> dict[str, Any] | None:
    """A server frame as a JSON object, or None when it is not one (MALFORMED_RESPONSE)."""
    try:
        value = json.loads(frame)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, absurd nesting
        return None
    return value if isinstance(value, dict) else None


def malformed_frame(ctx: SessionContext, *, method: str | None, endpoint: str) -> RawError:
    """The RawError for a frame that is not a JSON object: the taxonomy's MALFORMED_RESPONSE."""
    return RawError(
        platform=ctx.platform,
        channel=ctx.channel,
        method=method,
        endpoint=endpoint,
        exception="json.JSONDecodeError",
        context=ctx.envelope_context(),
    )


def scrub(value: Any, secret: str) -> Any:
    """``value`` with every occurrence of ``secret`` in its strings replaced by ``***``."""
    if not secret:
        return value
    if isinstance(value, str):
        return value.replace(secret, _REDACTED)
    if isinstance(value, Mapping):
        return {scrub(k, secret): scrub(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secret) for v in value]
    return value


def abort_socket(ws: ClientConnection) -> None:
    """Drop the TCP link without a closing handshake (the peer is unresponsive, RFC 6455 §7.1.1)."""
    with contextlib.suppress(OSError, RuntimeError, AttributeError):
        ws.transport.abort()


async def shutdown_socket(ws: ClientConnection, code: CloseCode, reason: str, within: float) -> None:
    """Close with ``code`` within ``within`` s, else abort; never raises."""
    try:
        with anyio.move_on_after(within):
            await ws.close(code, reason)
    except (*SOCKET_FAILURES, ValueError):
        pass
    if ws.state is not State.CLOSED:
        abort_socket(ws)


async def discard_socket(ws: ClientConnection, failure: RawError, within: float) -> None:
    """After a failed open: a polite close, or an abort when the peer stopped answering."""
    if failure.exception == "TimeoutError":
        abort_socket(ws)  # a closing handshake would only wait close_timeout for it again
    else:
        await shutdown_socket(ws, CloseCode.NORMAL_CLOSURE, "", within)


async def await_liveness(
    ws: ClientConnection,
    probe: str,
    answered: Callable[[], anyio.Event],
    *,
    interval: float,
    answer_within: float,
    scope: anyio.CancelScope,
) -> None:
    """Send ``probe`` every ``interval`` s; when ``answered()`` is not set within ``answer_within`` s, give up.

    Giving up aborts the socket and cancels ``scope`` (the serve task group).
    """
    while True:
        await anyio.sleep(interval)
        event = answered()
        with anyio.move_on_after(answer_within) as waited:
            try:
                await ws.send(probe)
            except SOCKET_FAILURES:
                return  # the link is gone: the receive loop reports how it ended
            await event.wait()
        if waited.cancelled_caught:
            abort_socket(ws)
            scope.cancel()
            return


# -- the transport -------------------------------------------------------------------------------------


async def receive_frames(
    ws: ClientConnection,
    ctx: SessionContext,
    endpoint: str,
    classify: Callable[[dict[str, Any] | None], RawError | None],
    report: Reporter,
    release: Callable[[], Awaitable[None]],
) -> RawError:
    """The receive loop both Genesys sockets share; returns the RawError that ended the connection.

    ``classify`` turns a frame (None when it is not a JSON object) into the failure it stands
    for, or None; each failure goes to ``report``, and when the runtime answers False the
    socket is let go through ``release`` and that failure is returned.
    """
    while True:
        try:
            frame = await ws.recv()
        except SOCKET_CLOSED as exc:
            # the close code the server sent (exc.rcvd), or 1006 when the link just died (RFC 6455 7.1.5)
            return raw_from_exception(exc, ctx=ctx, endpoint=endpoint)
        raw = classify(decode_frame(frame))
        if raw is None:
            continue
        if not await report(raw):
            await release()
            return raw


async def serve_alive(
    ws: ClientConnection,
    ctx: SessionContext,
    keepalive: Keepalive,
    probe: str,
    answered: Callable[[], anyio.Event],
    receive: Callable[[], Awaitable[RawError | None]],
) -> RawError:
    """Run ``receive`` until the connection ends, probing liveness every ``keepalive.echo_interval`` s.

    ``receive`` returns the RawError that ended the connection; when the probe goes unanswered
    for ``keepalive.echo_timeout`` s, the link is aborted and the result is close 1006.
    """
    outcome: RawError | None = None
    async with anyio.create_task_group() as tg:
        if keepalive.echo_interval > 0:
            tg.start_soon(
                partial(
                    await_liveness,
                    ws,
                    probe,
                    answered,
                    interval=keepalive.echo_interval,
                    answer_within=keepalive.echo_timeout,
                    scope=tg.cancel_scope,
                )
            )
        outcome = await receive()
        tg.cancel_scope.cancel()
    # None: the probe gave up and aborted the link without a close frame (RFC 6455 section 7.1.5)
    return outcome if outcome is not None else raw_from_close(CloseCode.ABNORMAL_CLOSURE, ctx=ctx)
