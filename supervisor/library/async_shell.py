"""The library's async shell: :mod:`supervisor.library.sync_shell`'s loop, awaiting where it waits.

(for ``httpx.AsyncClient`` and async decorated functions; anyio, so asyncio and trio alike.) One call: the endpoint's Retry-After hold waited out, admission asked (its circuit: a refusal raises
:class:`~supervisor.errors.CircuitOpenError`), the attempt made with the current token, its failure
classified once and told to the endpoint once, and then what :class:`~supervisor.library.core.Plan`
says: send again after a delay (when the endpoint's retry budget lets the retry go), replay at once
with a fresh token, or end.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack

import anyio

from machines.endpoint import Refused, Wait
from supervisor.errors import CircuitOpenError
from supervisor.library.core import Answer, Core, End, Plan, Replay, Request
from supervisor.library.gate import Door, ended, with_token_age
from supervisor.library.hooks import RetryDetails, RetryHook
from supervisor.library.tokens import REFRESH_BEFORE_RETRY_S, Tokens
from supervisor.rest.tokens import Token
from supervisor.taxonomy.model import SdkErrorEvent

__all__ = ["run"]

Sleep = Callable[[float], Awaitable[None]]


async def run(
    core: Core,
    door: Door,
    request: Request,
    attempt: Callable[[Token | None], Awaitable[Answer]],
    discard: Callable[[Answer], Awaitable[None]],
    *,
    name: str,
    tokens: Tokens | None = None,
    hooks: Sequence[RetryHook] = (),
    sleep: Sleep = anyio.sleep,
) -> tuple[Answer, SdkErrorEvent | None]:
    """One call through the endpoint ``door``: the final answer and its event (None: a success)."""
    clock = core.clock
    plan: Plan = core.plan(request, has_token=tokens is not None)
    token = await tokens.aget() if tokens is not None else None
    door.called()
    waited = 0.0
    retry_num = 0
    details: RetryDetails | None = None
    while True:
        # a Retry-After holds the whole endpoint: nobody is sent before it ends
        while (held := door.held_for()) > 0:
            await sleep(held)
        admission = door.ask()
        while isinstance(admission, Wait):  # the slot of the endpoint's pace (engaged by a throttle)
            await sleep(admission.seconds)
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
            answer = await attempt(token)
            if answer.raw is None:
                door.answered(ticket, None, sent_at, answer.reading)
                return answer, None
            event = core.classify(with_token_age(answer.raw, tokens, token, age_async=True))
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
                await discard(answer)
                token = await tokens.arefresh(token)
                details = RetryDetails(
                    name, str(door.endpoint_id), retry_num, 0.0, waited, event, token_replay=True
                )
                break
            details = RetryDetails(
                name, str(door.endpoint_id), retry_num, step.delay_s, waited, event, step.from_retry_after
            )
            await sleep(step.delay_s)
            waited += step.delay_s
            if door.may_retry():
                await discard(answer)
                plan.retried()
                if tokens is not None:
                    token = await tokens.aget(REFRESH_BEFORE_RETRY_S)
                break
            step = plan.skipped()
            retry_num -= 1
