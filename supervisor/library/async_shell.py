"""The library's async shell: :func:`supervisor.library.gate.steps`, the one loop, awaiting where it waits.

(for ``httpx.AsyncClient`` and async decorated functions; anyio, so asyncio and trio alike.) It does what
each step asks (``anyio.sleep``, the attempt, the token cache's single flight) and hands back what came of
it; every decision is the loop's and the core's, as in :mod:`supervisor.library.sync_shell`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from supervisor.library.core import Answer
from supervisor.library.gate import Call, Discard, Fetch, Send, Sleep, steps
from supervisor.rest.tokens import Token
from supervisor.taxonomy.model import SdkErrorEvent

__all__ = ["run"]

SleepFn = Callable[[float], Awaitable[None]]


async def run(
    call: Call,
    attempt: Callable[[Token | None], Awaitable[Answer]],
    discard: Callable[[Answer], Awaitable[None]],
    *,
    sleep: SleepFn = anyio.sleep,
) -> tuple[Answer, SdkErrorEvent | None]:
    """One call (:func:`~supervisor.library.gate.steps`): the final answer and its event (None: a success)."""
    loop = steps(call, age_async=True)
    tokens = call.tokens
    try:
        step = next(loop)
        while True:
            reply: Any = None
            try:
                if isinstance(step, Send):
                    reply = await attempt(step.token)
                elif isinstance(step, Sleep):
                    await sleep(step.seconds)
                elif isinstance(step, Discard):
                    await discard(step.answer)
                elif tokens is None:  # (the loop asks for a token only when there is a cache)
                    raise AssertionError(f"a token step without a token cache: {step!r}")
                elif isinstance(step, Fetch):
                    reply = await tokens.aget(step.min_validity_s)
                else:
                    reply = await tokens.arefresh(step.stale)
            except BaseException as exc:
                # where the loop waited for it: an attempt's failure (a cancellation) passes through its hooks' scopes
                step = loop.throw(exc)
                continue
            step = loop.send(reply)
    except StopIteration as done:
        result: tuple[Answer, SdkErrorEvent | None] = done.value
        return result
