"""The subscribe socket: read-only. One ``Subscribe`` call with ``more: true`` per connection.

Before it, a client may ask ``org.varlink.service.GetInfo`` / ``GetInterfaceDescription``;
each wait for a call is bounded by the handshake timeout. The Subscribe call registers the
subscriber with the hub in the same synchronous step as its snapshot is taken, so the first
reply is consistent with every delta after it. From then on the connection carries the stream
only: any further call ends it (``StreamTakesNoCalls``), and so does closing. The ``platform``
stream carries customer data: a peer outside ``[sockets] platformAllowUids`` /
``platformAllowGids`` (the daemon's uid and root always) is refused it with ``PermissionDenied``
before anything is registered. When the daemon stops, whatever is pending and a last ``end`` reply are written if the socket takes
them at once, and the connection is closed.
"""

from __future__ import annotations

import anyio

from supervisor.api.connection import Connection
from supervisor.api.events import Peer
from supervisor.api.fanout import Hub, Subscriber
from supervisor.api.idl import service_reply
from supervisor.api.listen import PeerPolicy
from supervisor.api.messages import PLATFORM_STREAM, Subscription, parse_subscription
from supervisor.api.protocol import (
    SERVICE,
    STATE,
    ApiFault,
    Method,
    check_method,
    encode_error,
    encode_reply,
    parse_call,
)
from supervisor.api.signatures import check_parameters
from supervisor.errors import ApiError
from supervisor.vocabulary import SessionState

__all__ = ["SubscribeService"]

_KNOWN = {
    SERVICE: frozenset({Method.GET_INFO.value, Method.GET_INTERFACE_DESCRIPTION.value}),
    STATE: frozenset({Method.SUBSCRIBE.value}),
}
_STATES = frozenset(s.value for s in SessionState)


class SubscribeService:
    """Handles each connection of the subscribe socket (see the module docstring)."""

    def __init__(
        self,
        hub: Hub,
        *,
        cap_bytes: int,
        lagged_disconnect_after: float,
        handshake_timeout: float,
        platform_policy: PeerPolicy | None = None,
    ) -> None:
        self.hub = hub
        self.configure(
            cap_bytes=cap_bytes,
            lagged_disconnect_after=lagged_disconnect_after,
            handshake_timeout=handshake_timeout,
            platform_policy=platform_policy,
        )

    def configure(
        self,
        *,
        cap_bytes: int,
        lagged_disconnect_after: float,
        handshake_timeout: float,
        platform_policy: PeerPolicy | None,
    ) -> None:
        """The buffer, lag and handshake bounds of the connections accepted from now on, and who may
        have the platform stream (at start, and on a reload)."""
        # who may have the platform stream (None: nobody; the API was built without platform events)
        self._platform_policy = platform_policy
        self._cap = cap_bytes
        self._after = lagged_disconnect_after
        self._handshake = handshake_timeout

    async def handle(self, connection: Connection) -> None:
        subscription = await self._handshake_phase(connection)
        if subscription is not None:
            await self._stream(connection, subscription)

    async def _handshake_phase(self, connection: Connection) -> Subscription | None:
        while True:
            with anyio.move_on_after(self._handshake) as waited:
                try:
                    frames = await connection.receive()
                except ApiError as error:
                    connection.fail(error)
                    return None
            if waited.cancelled_caught:
                connection.fail(
                    ApiError(
                        ApiFault.HANDSHAKE_TIMEOUT,
                        {"seconds": self._handshake, "problem": "no call within the handshake timeout"},
                        fatal=True,
                    )
                )
                return None
            if frames is None:
                return None
            for index, frame in enumerate(frames):
                try:
                    answer = self._answer(frame, connection.peer)
                except ApiError as error:
                    answer = encode_error(error)
                if isinstance(answer, bytes):
                    # a client that asks and never reads is not held past the handshake timeout either
                    if answer and not await connection.send(answer, max_wait_s=self._handshake):
                        return None
                    continue
                if index + 1 < len(frames) or connection.decoder.pending:
                    connection.fail(_stream_takes_no_calls())
                    return None
                return answer

    def _answer(self, frame: bytes, peer: Peer) -> Subscription | bytes:
        """The subscription a Subscribe call asks for, or the reply to any other call (b"" for oneway)."""
        call = parse_call(frame)
        check_method(call.method, _KNOWN)
        check_parameters(call.method, call.parameters)
        if call.method != Method.SUBSCRIBE:
            reply = service_reply(call, [STATE])
            return b"" if call.oneway else encode_reply(reply)
        if not call.more:
            raise ApiError(
                ApiFault.EXPECTED_MORE,
                {"problem": "Subscribe streams its replies: call it with more: true"},
            )
        subscription = parse_subscription(call.parameters, known_states=_STATES)
        if subscription.platform:
            policy = self._platform_policy
            if policy is None or self.hub.platform is None or not policy.allows(peer):
                raise ApiError(
                    ApiFault.PLATFORM_DENIED,
                    {
                        "stream": PLATFORM_STREAM,
                        "problem": f"the {PLATFORM_STREAM} stream carries customer data: uid {peer.uid} is not "
                        "in [sockets] platformAllowUids or a member of platformAllowGids",
                    },
                )
        return subscription

    async def _stream(self, connection: Connection, subscription: Subscription) -> None:
        hub = self.hub
        # built and registered in one synchronous step: no event falls between snapshot and deltas
        subscriber = Subscriber(
            connection,
            subscription,
            cap_bytes=self._cap,
            lagged_disconnect_after=self._after,
            snapshot=hub.snapshot_frame,
            lagged_gap=None if hub.platform is None else hub.platform.lagged_gap,
        )
        hub.add(subscriber)
        try:
            async with anyio.create_task_group() as tg:

                async def watch_input() -> None:
                    try:
                        frames = await connection.receive()
                    except ApiError:
                        frames = []
                    if frames is not None:
                        connection.send_nowait(encode_error(_stream_takes_no_calls()))
                    tg.cancel_scope.cancel()

                tg.start_soon(watch_input)
                await subscriber.write()
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            # the daemon is stopping: the stream ends with a last reply, if the socket takes it now
            subscriber.finish("daemon stopping")
            raise
        finally:
            hub.remove(subscriber)


def _stream_takes_no_calls() -> ApiError:
    return ApiError(
        ApiFault.STREAM_TAKES_NO_CALLS,
        {"problem": "a subscription carries the stream only: close it and connect again"},
        fatal=True,
    )
