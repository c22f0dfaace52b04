"""``@supervisor.resilient(platform=..., operation=...)``: the library's decisions for any callable.

For a sync or an async function that calls a platform with httpx or websockets: what it raises
(httpx's and websockets' errors, ``raise_for_status()``'s ``HTTPStatusError`` included) or returns
(an ``httpx.Response`` with a status of 400 or more) is classified through the taxonomy, and the
function is called again, or the call ends, as :class:`~supervisor.http.ResilientTransport` decides
for a request: the same core (supervisor/library/core.py), the same shells. The endpoint is the
platform and ``operation``; a function that creates something says ``idempotent=False`` (it is then
called again only when the failure shows nothing was done: a connect error, a 429, a 503 with
Retry-After). Anything else it raises is not the library's and goes through untouched.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

import anyio
import httpx

from supervisor.boundary import (
    HTTP_FAILURES,
    SOCKET_FAILURES,
    SessionContext,
)
from supervisor.clock import Clock, Rng
from supervisor.library import answers, async_shell, sync_shell
from supervisor.library.core import DEFAULT_RAISE_ON, PACE_FLOOR, PACE_RECOVERY, Answer, Core, Request
from supervisor.library.gate import Call, Doors
from supervisor.library.hooks import RetryHook
from supervisor.rest.tokens import Token
from supervisor.taxonomy.loader import DEFAULT_VERSION
from supervisor.taxonomy.model import Channel, Platform, TaxonomyClass, Trigger
from supervisor.taxonomy.rules import Taxonomy

__all__ = ["resilient"]

P = ParamSpec("P")
R = TypeVar("R")
_FAILURES = (*HTTP_FAILURES, *SOCKET_FAILURES)


def resilient(
    *,
    platform: Platform | str,
    operation: str,
    taxonomy: str | Path | Taxonomy = DEFAULT_VERSION,
    idempotent: bool = True,
    channel: Channel | str = Channel.REST,
    context: Mapping[str, Any] | None = None,
    raise_on: Collection[TaxonomyClass | Trigger] = DEFAULT_RAISE_ON,
    hooks: Sequence[RetryHook] = (),
    pace_floor: float = PACE_FLOOR,
    pace_recovery: float = PACE_RECOVERY,
    clock: Clock | None = None,
    rng: Rng | None = None,
    sleep: Callable[[float], None] | None = None,
    async_sleep: Callable[[float], Awaitable[None]] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a sync or async function (the module docstring); ``SdkError`` when the call ends in a
    failure it raised, or one in ``raise_on``; a response it returned otherwise, with its event."""
    core = Core(
        platform,
        taxonomy,
        raise_on=raise_on,
        context=context,
        clock=clock,
        rng=rng,
        pace_floor=pace_floor,
        pace_recovery=pace_recovery,
    )
    doors = Doors(core)
    ctx = SessionContext("library", core.platform, Channel(channel))
    endpoint = core.operation(operation)
    facts = Request(None, idempotent)
    sync_sleep = sleep if sleep is not None else time.sleep
    a_sleep = async_sleep if async_sleep is not None else anyio.sleep

    def of_result(result: object) -> Answer:
        if isinstance(result, httpx.Response) and result.status_code >= 400:
            return answers.failed(core, ctx, result)
        return Answer(result)

    def of_error(exc: BaseException) -> Answer:
        return answers.raised(core, ctx, exc, endpoint=operation)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        name = f"{platform}:{operation}"
        if inspect.iscoroutinefunction(fn):
            afn = cast(Callable[P, Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def acall(*args: P.args, **kwargs: P.kwargs) -> Any:
                async def attempt(token: Token | None) -> Answer:
                    try:
                        return of_result(await afn(*args, **kwargs))
                    except _FAILURES as exc:
                        return of_error(exc)

                one = Call(core, doors.door(endpoint), facts, name, None, hooks)
                answer, event = await async_shell.run(one, attempt, answers.aclose, sleep=a_sleep)
                return answers.returned(answer, event)

            return cast(Callable[P, R], acall)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            def attempt(token: Token | None) -> Answer:
                try:
                    return of_result(fn(*args, **kwargs))
                except _FAILURES as exc:
                    return of_error(exc)

            one = Call(core, doors.door(endpoint), facts, name, None, hooks)
            answer, event = sync_shell.run(one, attempt, answers.close, sleep=sync_sleep)
            return cast(R, answers.returned(answer, event))

        return call

    return decorate
