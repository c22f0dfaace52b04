"""The Web Messaging guest history over REST (docs/platforms.md, "Genesys Cloud Web Messaging", "Guest history").

``GET {apiUrl}/api/v2/webmessaging/messages?pageNumber=N&pageSize=S`` with the guest's JWT as a bearer
(GMT 2.14.0 ``WebMessagingApi.getMessages``, ``Urls.history``; PY269 ``WebMessagingApi.get_webmessaging_messages``).
The JWT comes from the guest socket's ``getJwt`` (GMT ``JwtHandler``). The answer is a page of
``WebMessagingMessage``s, newest first (GMT ``MessageStore.updateMessageHistory`` reverses each page), with
``total`` and ``pageCount`` (PY269 ``WebMessagingMessageEntityList``).

A read goes through the one retry executor on ``genesys:api`` (its pace, its circuit, its retry budget),
unsigned by the OAuth token cache: the guest JWT is its credential, and it is never put in a RawError
(the pipeline describes a failure by its status and body, never by the request's headers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from supervisor.boundary import SessionContext
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.taxonomy import Channel
from supervisor.vocabulary import EndpointId, Platform

__all__ = ["CLIENT_ID_KEY", "HISTORY_ROUTE", "PAGE_SIZE", "GuestHistory", "HistoryPage", "client_id_of"]

HISTORY_ROUTE: Final = "/api/v2/webmessaging/messages"
#: GMT MessageStore.kt DEFAULT_PAGE_SIZE
PAGE_SIZE: Final = 25
_OPERATION: Final = "webmessaging.history"
_CIRCUIT: Final = EndpointId.api(Platform.GENESYS)
# PY269 WebMessagingMessageEntityList: what a page must carry to be judged at all
_PAGE: Final = ResponseCheck(required=("entities",))
#: the message metadata key a send's client id travels under (beside the frame's tracingId): the
#: history names no tracingId, but keeps a message's ``metadata`` (PY269 WebMessagingMessage.metadata)
CLIENT_ID_KEY: Final = "customMessageId"


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page of the guest history: its messages as the platform sent them (newest first)."""

    entities: Sequence[Mapping[str, Any]]
    total: int
    page_count: int


def client_id_of(message: Mapping[str, Any]) -> str | None:
    """The client id a guest message was sent with (its ``metadata`` entry), or None."""
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    value = metadata.get(CLIENT_ID_KEY)
    return value if isinstance(value, str) else None


class GuestHistory:
    """Reads the guest history of one platform's API host (one per daemon, shared by sessions)."""

    def __init__(self, pipeline: RequestPipeline, api_url: str) -> None:
        if pipeline.tokens is not None:
            # the guest JWT signs these reads: an OAuth token cache would overwrite it
            raise ValueError("GuestHistory needs a pipeline without a token cache")
        self._pipeline = pipeline
        self._url = api_url.rstrip("/") + HISTORY_ROUTE

    async def page(
        self, ctx: SessionContext, jwt: str, number: int = 1, size: int = PAGE_SIZE
    ) -> HistoryPage:
        """One page; raises the executor's OperationError or CircuitOpenError."""
        response = await self._pipeline.request(
            "GET",
            # the query in the URL (ints: nothing to escape), not httpx's params: parsed once
            f"{self._url}?pageNumber={number}&pageSize={size}",
            ctx=ctx,
            circuit=_CIRCUIT,
            operation=_OPERATION,
            channel=Channel.REST,
            check=_PAGE,
            route=HISTORY_ROUTE,
            headers={"Authorization": f"Bearer {jwt}"},
        )
        body = response.json()
        entities = body.get("entities") if isinstance(body, Mapping) else None
        listed = [e for e in entities if isinstance(e, Mapping)] if isinstance(entities, list) else []
        total = body.get("total") if isinstance(body, Mapping) else None
        pages = body.get("pageCount") if isinstance(body, Mapping) else None
        return HistoryPage(
            listed,
            total if isinstance(total, int) else len(listed),
            pages if isinstance(pages, int) else 1,
        )
