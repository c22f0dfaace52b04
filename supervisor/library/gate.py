"""The library shells' one door to an endpoint (:class:`machines.endpoint.Endpoint`, under a lock), and
the one loop of a call through it (:func:`steps`).

The decisions are the endpoint's (its circuit with the seed's rule, its retry budget, its
Retry-After hold), the same core the daemon's attempt shell drives (supervisor/attempts/shell.py).
The library may be called from many threads at once (a sync ``httpx.Client`` shared by a thread
pool): each endpoint's state is guarded by its own lock, held only while the endpoint decides,
never while a request is in flight or a shell sleeps, and the table of endpoints by another.

A call's loop is written once, as a generator that yields what it needs done (websockets' and h11's
model: the protocol does no I/O, the shell does): sleep, send the attempt, discard an answer, get or
refresh the token. The sync shell (supervisor/library/sync_shell.py) does each at once, the async shell
(supervisor/library/async_shell.py) awaits it; neither decides anything.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Sequence
from contextlib import ExitStack
from typing import Any, Final, NamedTuple

import msgspec

from machines.endpoint import Booking, Endpoint, Refused, Ticket, Wait
from supervisor.errors import CircuitOpenError, SdkError
from supervisor.library.core import Answer, Core, End, Replay, Request
from supervisor.library.hooks import RetryDetails, RetryHook
from supervisor.library.tokens import REFRESH_BEFORE_RETRY_S, Tokens
from supervisor.rest.tokens import Token
from supervisor.taxonomy.envelope import RawError
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.taxonomy.model import SdkErrorEvent
from supervisor.vocabulary import EndpointId

__all__ = [
    "Call",
    "Discard",
    "Door",
    "Doors",
    "Fetch",
    "Refresh",
    "Send",
    "Sleep",
    "Step",
    "Steps",
    "ended",
    "steps",
    "with_token_age",
]


class Door:
    """One endpoint's decisions, each taken under the endpoint's lock."""

    __slots__ = ("_endpoint", "_lock", "endpoint_id")

    def __init__(self, endpoint: Endpoint, lock: threading.Lock) -> None:
        self._endpoint = endpoint
        self._lock = lock
        self.endpoint_id = endpoint.endpoint_id

    def called(self) -> None:
        with self._lock:
            self._endpoint.called()

    def held_for(self) -> float:
        """Seconds a Retry-After still holds the endpoint: nobody is sent before it ends."""
        with self._lock:
            return self._endpoint.held_for()

    def ask(self, booking: Booking | None = None) -> Ticket | Wait | Refused:
        """Admitted, refused, or wait for the slot of the endpoint's pace and ask again with ``booking``."""
        with self._lock:
            return self._endpoint.ask(booking)

    def answered(
        self,
        ticket: Ticket,
        failure: SdkErrorEvent | None,
        sent_at: float,
        reading: RateLimitReading | None = None,
    ) -> None:
        with self._lock:
            self._endpoint.answered(ticket, failure, sent_at, reading)

    def may_retry(self) -> bool:
        with self._lock:
            return self._endpoint.may_retry()


_PRUNE_FACTOR: Final = 2


class Doors:
    """The doors of one core's endpoints: one lock per endpoint, made on first use."""

    __slots__ = ("_core", "_locks", "_table")

    def __init__(self, core: Core) -> None:
        self._core = core
        self._table = threading.Lock()
        self._locks: dict[EndpointId, threading.Lock] = {}

    def door(self, endpoint_id: EndpointId) -> Door:
        with self._table:
            lock = self._locks.get(endpoint_id)
            if lock is None:
                if len(self._locks) >= _PRUNE_FACTOR * self._core.max_endpoints:
                    # the locks of endpoints the table forgot go with them (amortised)
                    kept = self._core.endpoints.all()
                    self._locks = {k: v for k, v in self._locks.items() if k in kept}
                lock = self._locks[endpoint_id] = threading.Lock()
            # the table (its LRU order) is touched here only, under its lock; a call goes on with the
            # endpoint it got even if the table forgets it meanwhile
            endpoint = self._core.endpoints.get(endpoint_id)
        return Door(endpoint, lock)


def with_token_age(raw: RawError, tokens: Tokens | None, token: Token | None, age_async: bool) -> RawError:
    """The envelope with what our clock says of the request's token (the 401 rule reads it)."""
    if tokens is None or token is None:
        return raw
    age = tokens.aage(token) if age_async else tokens.age(token)
    keys = age.context()
    if not keys:
        return raw
    return msgspec.structs.replace(raw, context={**(raw.context or {}), **keys})


def ended(final: End, answer: Answer) -> tuple[Answer, SdkErrorEvent]:
    """The call ends: raise what raises, else the answer with its event."""
    if final.raises or answer.error is not None:
        error = SdkError(final.event, outcome_unknown=final.outcome_unknown, exhausted=final.exhausted)
        if answer.error is not None:
            raise error from answer.error
        raise error
    return answer, final.event


# -- what the loop asks its shell to do (each answered with what it came back with) ---------------------------


class Sleep(NamedTuple):
    """Wait this long (answered with None)."""

    seconds: float


class Send(NamedTuple):
    """Make the attempt, signed with ``token`` (answered with its :class:`Answer`)."""

    token: Token | None


class Discard(NamedTuple):
    """Release an answer that will not be returned (a response's connection; answered with None)."""

    answer: Answer


class Fetch(NamedTuple):
    """The current token, valid for at least ``min_validity_s`` if said (answered with the token)."""

    min_validity_s: float | None


class Refresh(NamedTuple):
    """A fresh token in place of ``stale`` (answered with the token)."""

    stale: Token | None


Step = Sleep | Send | Discard | Fetch | Refresh
#: one call's loop: the steps it yields, and at its end the final answer and its event (None: a success)
Steps = Generator[Step, Any, tuple[Answer, SdkErrorEvent | None]]


class Call(NamedTuple):
    """One call, as both shells take it: the core, the endpoint's door, what the request is, its name for the
    hooks, the token cache (None: the attempt signs nothing) and the hooks."""

    core: Core
    door: Door
    request: Request
    name: str
    tokens: Tokens | None = None
    hooks: Sequence[RetryHook] = ()


def steps(call: Call, *, age_async: bool) -> Steps:
    """One call through the endpoint ``call.door``: the endpoint's Retry-After hold waited out, admission asked
    (its circuit: a refusal raises :class:`~supervisor.errors.CircuitOpenError`), the attempt made with the
    current token, its failure classified once and told to the endpoint once, and then what
    :class:`~supervisor.library.core.Plan` says: send again after a delay (when the endpoint's retry budget
    lets the retry go), replay at once with a fresh token, or end (:func:`ended`). ``age_async``: the token's
    age is read as the async shell reads it (``Tokens.aage``)."""
    core, door, request, name, tokens, hooks = call
    clock = core.clock
    plan = core.plan(request, has_token=tokens is not None)
    token: Token | None = (yield Fetch(None)) if tokens is not None else None
    door.called()
    waited = 0.0
    retry_num = 0
    details: RetryDetails | None = None
    while True:
        # a Retry-After holds the whole endpoint: nobody is sent before it ends
        while (held := door.held_for()) > 0:
            yield Sleep(held)
        admission = door.ask()
        while isinstance(admission, Wait):  # the slot of the endpoint's pace (engaged by a throttle)
            yield Sleep(admission.seconds)
            admission = door.ask(admission.booking)
        if isinstance(admission, Refused):
            raise CircuitOpenError(admission.circuit_id, admission.retry_in_s)
        ticket = admission
        with ExitStack() as scope:
            if details is not None:
                for hook in hooks:
                    entered = hook(details)
                    if entered is not None:
                        scope.enter_context(entered)
            sent_at = clock.monotonic()
            answer: Answer = yield Send(token)
            if answer.raw is None:
                door.answered(ticket, None, sent_at, answer.reading)
                return answer, None
            event = core.classify(with_token_age(answer.raw, tokens, token, age_async))
            step = plan.failed(
                event, not_sent=answer.not_sent, lost=answer.error is not None and not answer.not_sent
            )
            if not (isinstance(step, End) and step.untold):
                door.answered(ticket, event, sent_at)
        while True:
            if isinstance(step, End):
                return ended(step, answer)
            retry_num += 1
            if isinstance(step, Replay):
                assert tokens is not None
                yield Discard(answer)
                token = yield Refresh(token)
                details = RetryDetails(
                    name, str(door.endpoint_id), retry_num, 0.0, waited, event, token_replay=True
                )
                break
            details = RetryDetails(
                name, str(door.endpoint_id), retry_num, step.delay_s, waited, event, step.from_retry_after
            )
            yield Sleep(step.delay_s)
            waited += step.delay_s
            if door.may_retry():
                yield Discard(answer)
                plan.retried()
                if tokens is not None:
                    token = yield Fetch(REFRESH_BEFORE_RETRY_S)
                break
            step = plan.skipped()
            retry_num -= 1
