"""The library's sync shell: it only sleeps, sends and records; every decision is the core's.

One call is :func:`supervisor.library.gate.steps`, the one loop both shells run: this shell does what each
step asks at once (``time.sleep``, the attempt, the token cache's lock) and hands back what came of it.
:mod:`supervisor.library.async_shell` does the same with awaits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from supervisor.library.core import Answer
from supervisor.library.gate import Call, Discard, Fetch, Send, Sleep, steps
from supervisor.rest.tokens import Token
from supervisor.taxonomy.model import SdkErrorEvent

__all__ = ["run"]

SleepFn = Callable[[float], None]


def run(
    call: Call,
    attempt: Callable[[Token | None], Answer],
    discard: Callable[[Answer], None],
    *,
    sleep: SleepFn = time.sleep,
) -> tuple[Answer, SdkErrorEvent | None]:
    """One call (:func:`~supervisor.library.gate.steps`): the final answer and its event (None: a success)."""
    loop = steps(call, age_async=False)
    tokens = call.tokens
    try:
        step = next(loop)
        while True:
            reply: Any = None
            try:
                if isinstance(step, Send):
                    reply = attempt(step.token)
                elif isinstance(step, Sleep):
                    sleep(step.seconds)
                elif isinstance(step, Discard):
                    discard(step.answer)
                elif tokens is None:  # (the loop asks for a token only when there is a cache)
                    raise AssertionError(f"a token step without a token cache: {step!r}")
                elif isinstance(step, Fetch):
                    reply = tokens.get(step.min_validity_s)
                else:
                    reply = tokens.refresh(step.stale)
            except BaseException as exc:
                # where the loop waited for it: an attempt's failure passes through its hooks' scopes
                step = loop.throw(exc)
                continue
            step = loop.send(reply)
    except StopIteration as done:
        result: tuple[Answer, SdkErrorEvent | None] = done.value
        return result
