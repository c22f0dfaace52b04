"""The shared notifications channel machine: connecting → open ⇄ reconnecting → closed, pure.

One Genesys notifications channel carries the topics of many agent sessions of one OAuth client
(docs/runtime.md, "Shared notification channels"). The channel is a machine of its own, so that a
channel's drop is the channel's business: one reconnection of the channel recovers every agent on
it, and an agent session ends only for its own causes.

* :class:`ChannelMachine` declares the moves (strict python-statemachine ``StateMachine``).
* :class:`ChannelCore` is the driver the runtime calls; it draws delays from the injected RNG,
  reads the injected clock, and returns effects as data for the runtime to execute.

Rules:

* ``connected`` only once the channel is created, its socket open and its topics subscribed;
* a drop (the socket ended, the platform said the channel is gone, closing or evicted) moves an
  open or connecting channel to ``reconnecting``: the first reconnection waits U(2 s, 8 s), as a
  session's does (seed edge case 1: a fleet dropped at once does not come back in one
  millisecond), later ones double from the top of that range up to ``max_delay_s`` [I: the
  channel's later delays are ours, a full-jitter exponential backoff (AWS architecture blog,
  "Exponential Backoff And Jitter")];
* while the channel's endpoint circuit is open a due reconnection is deferred by the circuit's
  remaining time and not counted (``throttled``), as a session's is;
* a channel never gives up by itself: it lives as long as an agent needs it, and the runtime
  ``close``\\ s it when its last agent leaves or the daemon stops. Nothing leaves ``closed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from machines.effects import InputRejected
from supervisor.clock import Clock, Rng
from supervisor.vocabulary.states import ChannelState

__all__ = [
    "ChannelConfig",
    "ChannelCore",
    "ChannelEffect",
    "ChannelMachine",
    "ChannelMoved",
    "ConnectChannel",
    "MembersDropped",
    "ScheduleChannelReconnect",
]


class ChannelMachine(StateMachine):
    """Legal moves of one shared notifications channel; strict: an unaccepted event raises."""

    connecting = State(initial=True, value=ChannelState.CONNECTING)
    open = State(value=ChannelState.OPEN)
    reconnecting = State(value=ChannelState.RECONNECTING)
    closed = State(final=True, value=ChannelState.CLOSED)

    # created, its socket open, its topics subscribed
    connected = connecting.to(open)
    # the socket ended, or the platform said the channel is gone (404: expired or evicted; its token
    # revoked; a socket_closing a pinned v1 reconnects on),
    # or an attempt to (re)connect failed
    dropped = connecting.to(reconnecting) | open.to(reconnecting)
    # the reconnection timer fired and the endpoint's circuit admits: connect a new channel
    reconnect = reconnecting.to(connecting)
    # seed edge case 1: the circuit is open: defer, not counted
    throttled = reconnecting.to.itself(internal=True)  # type: ignore[no-untyped-call,unused-ignore]
    # its last agent left, or the daemon stops
    close = connecting.to(closed) | open.to(closed) | reconnecting.to(closed)


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """The channel's reconnection numbers; the first delay is the seed's."""

    # seed edge case 1: "a randomized initial delay between 2 and 8 seconds"
    first_delay_s: tuple[float, float] = (2.0, 8.0)
    max_delay_s: float = 60.0

    def __post_init__(self) -> None:
        lo, hi = self.first_delay_s
        if not 0.0 <= lo <= hi:
            raise ValueError(f"first_delay_s must satisfy 0 <= low <= high, got {self.first_delay_s!r}")
        if self.max_delay_s < hi:
            raise ValueError(f"max_delay_s must be >= the first delay's high end, got {self.max_delay_s!r}")


# -- effects ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChannelMoved:
    """The channel moved from ``source`` to ``target`` on ``event``."""

    channel_key: str
    source: ChannelState
    target: ChannelState
    event: str


@dataclass(frozen=True, slots=True)
class MembersDropped:
    """The channel dropped: every agent session on it moves to reconnecting (``members``)."""

    channel_key: str
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ScheduleChannelReconnect:
    """Call :meth:`ChannelCore.reconnect_due` at monotonic ``at`` (``attempt``: counted ones)."""

    channel_key: str
    at: float
    attempt: int
    delay_s: float
    first: bool


@dataclass(frozen=True, slots=True)
class ConnectChannel:
    """Create, connect and subscribe a new channel now (``attempt`` 0: the first connection)."""

    channel_key: str
    attempt: int


ChannelEffect = ChannelMoved | MembersDropped | ScheduleChannelReconnect | ConnectChannel


class ChannelCore:
    """Pure driver of one shared channel: its members, its state, its reconnection delays.

    Every method raises :class:`~machines.effects.InputRejected` for an input the current state
    does not accept; a closed channel accepts nothing but :meth:`leave`.
    """

    __slots__ = (
        "_attempts",
        "_clock",
        "_config",
        "_members",
        "_rng",
        "_sm",
        "_state",
        "channel_key",
        "reconnections",
    )

    def __init__(self, channel_key: str, clock: Clock, rng: Rng, config: ChannelConfig | None = None) -> None:
        self.channel_key = channel_key
        self._clock = clock
        self._rng = rng
        self._config = config if config is not None else _DEFAULT_CONFIG
        self._sm = ChannelMachine()
        self._state: ChannelState = self._sm.current_state_value
        # the agent sessions whose topics this channel carries, in the order they joined
        self._members: dict[str, None] = {}
        # reconnections scheduled since the channel was last open
        self._attempts = 0
        #: reconnections that succeeded over the channel's life (one per drop that recovered)
        self.reconnections = 0

    # -- inspection ------------------------------------------------------------------------------

    @property
    def state(self) -> ChannelState:
        return self._state

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(self._members)

    @property
    def attempts(self) -> int:
        return self._attempts

    # -- members ---------------------------------------------------------------------------------

    def join(self, session_id: str) -> None:
        """An agent session's topics go onto this channel (any state but closed)."""
        if self._state is ChannelState.CLOSED:
            raise InputRejected(self.channel_key, self._state, "join")
        self._members[session_id] = None

    def leave(self, session_id: str) -> None:
        """An agent session left (ended, or moved to another channel); unknown ids are ignored."""
        self._members.pop(session_id, None)

    # -- inputs ----------------------------------------------------------------------------------

    def connected(self) -> list[ChannelEffect]:
        """The channel is created, connected and subscribed: open; the attempt count resets."""
        effects: list[ChannelEffect] = [self._move("connected")]
        if self._attempts:
            self.reconnections += 1
        self._attempts = 0
        return effects

    def dropped(self) -> list[ChannelEffect]:
        """The channel (or the attempt to make it) failed: every member is dropped, and the
        channel's reconnection is scheduled (the first after U(lo, hi) s)."""
        index = self._attempts
        lo, hi = self._config.first_delay_s
        if index == 0:
            delay = lo + self._rng.random() * (hi - lo)
        else:
            ceiling = min(self._config.max_delay_s, hi * 2.0**index)
            delay = lo + self._rng.random() * (ceiling - lo)
        self._attempts = index + 1
        effects: list[ChannelEffect] = [self._move("dropped")]
        if self._members:
            effects.append(MembersDropped(self.channel_key, tuple(self._members)))
        now = self._clock.monotonic()
        effects.append(
            ScheduleChannelReconnect(self.channel_key, now + delay, self._attempts, delay, index == 0)
        )
        return effects

    def reconnect_due(self, circuit_open_remaining_s: float | None) -> list[ChannelEffect]:
        """The reconnection timer fired; ``circuit_open_remaining_s`` is None when the endpoint's
        circuit admits (then: connect), else the deferral (not counted)."""
        if self._state is not ChannelState.RECONNECTING:
            raise InputRejected(self.channel_key, self._state, "reconnect_due")
        if circuit_open_remaining_s is not None and circuit_open_remaining_s > 0.0:
            self._send("throttled")
            delay = circuit_open_remaining_s
            at = self._clock.monotonic() + delay
            return [ScheduleChannelReconnect(self.channel_key, at, self._attempts, delay, False)]
        return [self._move("reconnect"), ConnectChannel(self.channel_key, self._attempts)]

    def close(self) -> list[ChannelEffect]:
        """Its last agent left, or the daemon stops."""
        return [self._move("close")]

    # -- internals -------------------------------------------------------------------------------

    def _send(self, event: str) -> None:
        try:
            self._sm.send(event)
        except TransitionNotAllowed as exc:
            raise InputRejected(self.channel_key, self._state, event) from exc
        self._state = self._sm.current_state_value

    def _move(self, event: str) -> ChannelMoved:
        source = self._state
        self._send(event)
        return ChannelMoved(self.channel_key, source, self._state, event)


_DEFAULT_CONFIG: Final = ChannelConfig()
