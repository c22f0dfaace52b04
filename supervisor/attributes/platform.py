"""Genesys participant attributes over REST, through the one retry executor (docs/platforms.md, "Genesys Cloud Platform REST").

* :meth:`GenesysAttributes.read` is ``GET /api/v2/conversations/{cid}`` (PY269 ``Conversation``): the
  customer participant's id and attributes. Flows and agents write participant data there; it is
  the participant whose attributes we update. The answer is validated as the taxonomy's
  ``genesys.rest.Conversation`` before anything is judged on it (seed section 3; docs/attributes.md):
  v2 requires ``participants`` and checks that an ``id``, when the read names one, is ours. A read
  carries no top-level ``state`` (PY269: "When reading conversations, this field will never have
  a value present"), so v2 does not ask for one; v1 did, and a configuration pinning v1 still does.
* :meth:`GenesysAttributes.send` is ``PATCH /api/v2/conversations/{cid}/participants/{pid}/attributes``
  with ``{"attributes": {...}}`` (``ParticipantAttributes``; 202, no body), the route every media
  type has. The messaging variant answers the merged map, but that answer only echoes what was
  asked (the seed's silent drop answers success all the same), so it proves nothing: only the
  read-back 3 s later does.

Both go through :meth:`~supervisor.rest.pipeline.RequestPipeline.call`, so the executor decides
retries (429 + Retry-After as the minimum delay, seconds or HTTP-date; 5xx with backoff) and
classifies each answer (once: nothing here classifies), the endpoint ``genesys:api`` admits them
and holds a Retry-After for everyone (the tenant waits on that hold: :meth:`GenesysAttributes.gate`),
and the token is refreshed as everywhere else. What only this module knows:

* a write that may have reached the platform and got no answer (the connection failed after
  the request was written, or the taxonomy flags the failure ``reconcileBeforeRetry``: the
  executor ends a non-idempotent operation there) ends unretried: its outcome is unknown, and the
  caller reads the conversation back before anything is sent again (docs/robustness.md, "Durability"). A
  failure before the request left (connect, pool) is retried as usual. Every request carries the
  ledger's ``Idempotency-Key``, and every request after the first is counted in the ledger (and
  committed) before it leaves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from supervisor.attempts import Gate
from supervisor.boundary import (
    HTTP_FAILURES,
    HTTP_NOT_SENT,
    SessionContext,
    raw_from_exception,
    raw_from_response,
)
from supervisor.errors import ConnectionLost, OperationError
from supervisor.rest.pipeline import RequestPipeline, ResponseCheck
from supervisor.rest.tokens import Token
from supervisor.taxonomy import Channel, RawError, SdkErrorEvent
from supervisor.vocabulary import EndpointId, Platform

__all__ = ["CIRCUIT", "Conversation", "GenesysAttributes", "Target"]

#: the circuit of Genesys REST calls made for sessions (supervisor/runtime/supervisor.py does the same)
CIRCUIT = EndpointId.api(Platform.GENESYS)
READ = "conversation.get"
# the taxonomy's response of a read (PY269 Conversation; v2 requires participants, drift on id)
CONVERSATION = "genesys.rest.Conversation"
UPDATE = "attributes.update"


@dataclass(frozen=True, slots=True)
class Target:
    """Where a conversation's attributes are written: the platform's pipeline and API base."""

    pipeline: RequestPipeline
    api_url: str
    context: SessionContext


@dataclass(frozen=True, slots=True)
class Conversation:
    participant_id: str | None
    attributes: dict[str, str]


class OutcomeUnknown(Exception):
    """The request may have been applied and no answer came: read back, never re-send blindly."""


class GenesysAttributes:
    """Reads and writes of participant attributes for the attribute service."""

    def gate(self, target: Target) -> Gate:
        """The endpoint the reads and writes go through: its Retry-After hold is the tenant's."""
        return target.pipeline.gate(CIRCUIT)

    async def read(self, target: Target, conversation_id: str) -> Conversation:
        """The conversation's customer participant and its attributes. Raises OperationError, CircuitOpenError."""
        url = f"{target.api_url.rstrip('/')}/api/v2/conversations/{conversation_id}"
        # seed section 3: a read that lacks the conversation's anchors (or names another one)
        # must not decide anything: judged on it, every attribute would look silently dropped
        check = ResponseCheck(kind=CONVERSATION, expected_conversation_id=conversation_id)
        response = await self._call(target, "GET", url, READ, check=check)
        try:
            body = response.json()
        except (ValueError, RecursionError):
            body = {}
        return _customer(body if isinstance(body, dict) else {})

    async def send(
        self,
        target: Target,
        conversation_id: str,
        participant_id: str,
        payload: Mapping[str, str],
        *,
        idempotency_key: str,
        count_attempt: Callable[[], Awaitable[object]],
    ) -> int:
        """PATCH the attributes; the answer's status. Raises OutcomeUnknown, OperationError, CircuitOpenError."""
        url = (
            f"{target.api_url.rstrip('/')}/api/v2/conversations/{conversation_id}"
            f"/participants/{participant_id}/attributes"
        )
        response = await self._call(
            target,
            "PATCH",
            url,
            UPDATE,
            json={"attributes": dict(payload)},
            idempotency_key=idempotency_key,
            count_attempt=count_attempt,
        )
        return response.status_code

    async def _call(
        self,
        target: Target,
        method: str,
        url: str,
        operation: str,
        *,
        json: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        count_attempt: Callable[[], Awaitable[object]] | None = None,
        check: ResponseCheck | None = None,
    ) -> httpx.Response:
        pipeline, ctx = target.pipeline, target.context
        path = httpx.URL(url).path
        unknown = False
        attempts = 0

        async def attempt_once(token: Token | None) -> httpx.Response | RawError | SdkErrorEvent:
            nonlocal unknown, attempts
            attempts += 1
            if attempts > 1 and count_attempt is not None:
                # the ledger never counts fewer requests than the platform saw (the first is
                # counted when the send is claimed)
                await count_attempt()
            headers: dict[str, str] = {}
            if token is not None:
                headers["Authorization"] = token.authorization
            if idempotency_key is not None:
                headers["Idempotency-Key"] = idempotency_key
            try:
                response = await pipeline.client.request(method, url, headers=headers, json=json)
            except HTTP_NOT_SENT as exc:
                return raw_from_exception(exc, ctx=ctx, channel=Channel.REST, method=method, endpoint=path)
            except HTTP_FAILURES as exc:
                raw = raw_from_exception(exc, ctx=ctx, channel=Channel.REST, method=method, endpoint=path)
                if json is None:
                    return raw  # a read: retrying it is harmless
                unknown = True
                raise ConnectionLost(raw) from exc
            if 200 <= response.status_code < 300:
                if check is not None:
                    problem = pipeline.check_body(response, ctx, Channel.REST, path, check)
                    if problem is not None:
                        return problem  # MALFORMED_RESPONSE, INCOMPLETE_RESPONSE or STATE_DRIFT
                return response
            # (classified by the executor, once; a write it flags reconcileBeforeRetry ends there)
            return raw_from_response(
                response, ctx=ctx, channel=Channel.REST, endpoint=path, token_age=pipeline.token_age(token)
            )

        try:
            result: httpx.Response = await pipeline.call(
                attempt_once,
                ctx=ctx,
                circuit=CIRCUIT,
                operation=operation,
                idempotent=json is None,
                # the answer's inin-ratelimit-* slow the endpoint before its window is spent
                reading=pipeline.rate_reading,
            )
        except OperationError as failure:
            event = failure.event
            if json is not None and isinstance(event, SdkErrorEvent) and event.reconcile_before_retry:
                unknown = True
            if unknown:
                raise OutcomeUnknown() from None
            raise
        except Exception:
            if unknown:
                raise OutcomeUnknown() from None
            raise
        return result


def _customer(conversation: Mapping[str, Any]) -> Conversation:
    """The customer participant (PY269 ``Participant.purpose``), else the first one."""
    participants = [p for p in conversation.get("participants") or () if isinstance(p, Mapping)]
    chosen = next((p for p in participants if p.get("purpose") == "customer"), None)
    if chosen is None and participants:
        chosen = participants[0]
    if chosen is None:
        return Conversation(None, {})
    attrs = chosen.get("attributes")
    found = {str(k): v for k, v in attrs.items() if isinstance(v, str)} if isinstance(attrs, Mapping) else {}
    pid = chosen.get("id")
    return Conversation(pid if isinstance(pid, str) else None, found)
