"""What an httpx answer is to a library call, one definition for the transport and the decorator.

A failure (an answer with a status of 400 or more, or an httpx or websockets exception) becomes the
RawError the loop classifies, with the caller's ``context=`` (the seed's ``conversationId`` and
``agentId``) in place of the daemon's session id; what ends a call is handed back with its event in
the response's :data:`EVENT_EXTENSION`; a response that will not be handed back is closed.
"""

from __future__ import annotations

from typing import Any, Final

import httpx
import msgspec

from supervisor.boundary import HTTP_NOT_SENT, SessionContext, raw_from_exception, raw_from_response
from supervisor.library.core import Answer, Core
from supervisor.taxonomy.envelope import RawError

__all__ = ["EVENT_EXTENSION", "aclose", "close", "failed", "raised", "returned"]

#: the response extension that holds the SdkErrorEvent of a failure returned to the caller
EVENT_EXTENSION: Final = "session_supervisor.event"


def _with_context(core: Core, raw: RawError) -> RawError:
    # the library's envelopes name no session: the correlation fields are the caller's
    context = {k: v for k, v in (raw.context or {}).items() if k != "sessionId"}
    context.update(core.context)
    return msgspec.structs.replace(raw, context=context)


def failed(core: Core, ctx: SessionContext, response: httpx.Response) -> Answer:
    """A response with a failure status (its body read), to classify."""
    return Answer(response, _with_context(core, raw_from_response(response, ctx=ctx)))


def raised(
    core: Core, ctx: SessionContext, exc: BaseException, *, method: str | None = None, endpoint: str
) -> Answer:
    """An exception an attempt raised, to classify; a connect error (or timeout) never left this machine."""
    raw = raw_from_exception(exc, ctx=ctx, method=method, endpoint=endpoint)
    return Answer(None, _with_context(core, raw), isinstance(exc, HTTP_NOT_SENT), exc)


def returned(answer: Answer, event: object) -> Any:
    """What the caller gets: the answer's result, a response carrying the event of its failure."""
    result = answer.result
    if event is not None and isinstance(result, httpx.Response):
        result.extensions = {**result.extensions, EVENT_EXTENSION: event}
    return result


def close(answer: Answer) -> None:
    """Release a response that will not be handed back (its connection goes back to the pool)."""
    if isinstance(answer.result, httpx.Response):
        answer.result.close()


async def aclose(answer: Answer) -> None:
    if isinstance(answer.result, httpx.Response):
        await answer.result.aclose()
