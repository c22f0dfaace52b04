"""The library shells' one door to an endpoint: :class:`machines.endpoint.Endpoint`, under a lock.

The decisions are the endpoint's (its circuit with the seed's rule, its retry budget, its
Retry-After hold), the same core the daemon's attempt shell drives (supervisor/attempts/shell.py).
The library may be called from many threads at once (a sync ``httpx.Client`` shared by a thread
pool): each endpoint's state is guarded by its own lock, held only while the endpoint decides,
never while a request is in flight or a shell sleeps, and the table of endpoints by another.
"""

from __future__ import annotations

import threading
from typing import Final

import msgspec

from machines.endpoint import Booking, Endpoint, Refused, Ticket, Wait
from supervisor.errors import SdkError
from supervisor.library.core import Answer, Core, End
from supervisor.library.tokens import Tokens
from supervisor.rest.tokens import Token
from supervisor.taxonomy.envelope import RawError
from supervisor.taxonomy.headers import RateLimitReading
from supervisor.taxonomy.model import SdkErrorEvent
from supervisor.vocabulary import EndpointId

__all__ = ["Door", "Doors", "ended", "with_token_age"]


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
