"""Hooks in stamina's shape: called with frozen details before each retry, and free to return a
context manager that is entered around that attempt (a span, a timer, a log scope).

stamina's ``RetryHook`` is ``(RetryDetails) -> None | AbstractContextManager``; the names of the
details follow it (``name``, ``retry_num``, ``wait_for``, ``waited_so_far``, ``caused_by``), with the
classified :class:`~supervisor.taxonomy.model.SdkErrorEvent` as the cause and the endpoint it went to.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from supervisor.taxonomy.model import SdkErrorEvent

__all__ = ["RetryDetails", "RetryHook"]


@dataclass(frozen=True, slots=True)
class RetryDetails:
    """One retry about to be made (frozen: a hook cannot change what was decided)."""

    #: the operation (``resilient``'s ``operation``) or the request line (``GET https://...``)
    name: str
    #: the endpoint the call goes to (``<platform>:<method> <host><route>``)
    endpoint: str
    #: 1 for the first retry
    retry_num: int
    #: seconds waited before this retry (0 for a replay with a fresh token)
    wait_for: float
    #: seconds waited before the earlier retries of the call
    waited_so_far: float
    #: the classified failure that caused the retry
    caused_by: SdkErrorEvent
    #: the delay was the server's Retry-After (longer than the backoff)
    from_retry_after: bool = False
    #: the retry is the 401 rule's replay with a fresh token
    token_replay: bool = False


class RetryHook(Protocol):
    """Called before each retry; a context manager it returns is entered around the attempt."""

    def __call__(self, details: RetryDetails) -> AbstractContextManager[None] | None: ...
