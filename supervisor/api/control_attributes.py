"""The control socket's attribute verbs (docs/attributes.md): set, list mismatches, resolve one, status.

* ``SetAttributes``: answered only once the update is committed to the outbox (the caller may
  rely on it: it survives ``kill -9``). A full tenant queue answers ``Backpressure`` with
  ``retryAfterSeconds`` (``ctl attributes set`` exits 75, EX_TEMPFAIL); every other refusal is
  its own typed error (exit 1). Updates to the same (conversation, attribute) not yet sent
  coalesce (last write wins): ``coalesced`` says so.
* ``ListMismatches`` / ``ResolveMismatch``: manual reconciliation of what verification could not
  repair (seed section 3). Values of keys in ``[attributes] sensitive`` are never in an answer.

Every verb that changes something is published as ``CONTROL_COMMAND`` (never with a value).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from supervisor.api.protocol import ApiFault, Method
from supervisor.attributes import AttributeService, Refused
from supervisor.attributes.model import SubmitAnswer
from supervisor.errors import ApiError, StoreError
from supervisor.fleet.desired import FleetDesk
from supervisor.runtime.sessions import SessionOwners
from supervisor.store import Resolution

__all__ = ["AttributeVerbs", "Publish"]

#: the CONTROL_COMMAND of one call, with its caller: publish(verb, session id, target)(error or None)
Publish = Callable[[str, str | None, str | None], Callable[[ApiError | None], None]]


def _invalid(parameter: str, problem: str) -> ApiError:
    return ApiError(ApiFault.INVALID_PARAMETER, {"parameter": parameter, "problem": problem})


def _refusal(refused: Refused) -> ApiError:
    if refused.fault is ApiFault.INVALID_PARAMETER:
        return _invalid(str(refused.parameters.get("parameter", "attributes")), refused.problem)
    parameters = dict(refused.parameters)
    if refused.fault is ApiFault.UNSUPPORTED:
        parameters.setdefault("method", Method.SET_ATTRIBUTES.value)
    return ApiError(refused.fault, parameters)


class AttributeVerbs:
    """The attribute verbs of one control service; ``service`` is None when the daemon runs without one."""

    def __init__(
        self,
        service: AttributeService | None,
        *,
        owners: SessionOwners | None = None,
        fleet: FleetDesk | None = None,
    ) -> None:
        self._service = service
        # a fleet member accepts an update of a session another member owns: committed to the outbox
        # here, its owner told to send it (None: refused as NotOwner before the verb runs)
        self._owners = owners
        self._fleet = fleet

    async def _submit_elsewhere(
        self, service: AttributeService, session_id: str, attributes: Mapping[str, Any]
    ) -> SubmitAnswer | None:
        """An update of a session another fleet member owns, accepted here (None: the session is ours)."""
        owners, fleet = self._owners, self._fleet
        if owners is None or fleet is None or owners.owner_of(session_id).here:
            return None
        try:
            conversation = await fleet.conversation_of(session_id)
        except StoreError as exc:
            raise Refused(
                ApiFault.STORE_UNAVAILABLE, f"{exc}; nothing was acknowledged", path=exc.path
            ) from None

        async def tell(tenant: str, conversation_id: str) -> None:
            await fleet.attributes_submitted(session_id, tenant, conversation_id)

        return await service.submit_elsewhere(session_id, attributes, conversation, tell)

    def _require(self, method: str) -> AttributeService:
        if self._service is None:
            raise ApiError(
                ApiFault.UNSUPPORTED,
                {"method": method, "problem": "this daemon was started without attribute updates"},
            )
        return self._service

    async def set_attributes(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        session_id = parameters.get("sessionId")
        conversation_id = parameters.get("conversationId")
        if (session_id is None) == (conversation_id is None):
            raise _invalid("sessionId", "sessionId or conversationId: expected exactly one of them")
        if session_id is not None and (not isinstance(session_id, str) or not 0 < len(session_id) <= 200):
            raise _invalid("sessionId", "sessionId: expected a string of 1 to 200 characters")
        if conversation_id is not None and (
            not isinstance(conversation_id, str) or not 0 < len(conversation_id) <= 200
        ):
            raise _invalid("conversationId", "conversationId: expected a string of 1 to 200 characters")
        platform = parameters.get("platform", "genesys")
        if platform not in ("genesys", "cxone"):
            raise _invalid("platform", "platform: expected 'genesys' or 'cxone'")
        attributes = parameters.get("attributes")
        if not isinstance(attributes, Mapping):
            raise _invalid("attributes", "attributes: expected an object of KEY: VALUE strings")
        tenant = parameters.get("tenant")
        if tenant is not None and session_id is not None:
            # a session's updates go out with its own tenant's credential: naming one is a mistake
            raise _invalid("tenant", "tenant: given with conversationId only (a session's tenant is its own)")
        if tenant is not None and not (isinstance(tenant, str) and 0 < len(tenant) <= 64):
            raise _invalid("tenant", "tenant: expected a tenant name of 1 to 64 characters")

        # one path for both addresses: the CONTROL_COMMAND names the session, or the conversation as its target
        target = None if conversation_id is None else f"conversation:{conversation_id}"
        done = publish("attributes.set", session_id, target)
        try:
            if conversation_id is not None and platform == "cxone":
                # the daemon writes no CXone contact data (docs/attributes.md says why)
                raise Refused(
                    ApiFault.UNSUPPORTED,
                    "CXone conversations take no attribute updates: the daemon writes no CXone contact data",
                    conversationId=conversation_id,
                    platform=platform,
                )
            service = self._require(Method.SET_ATTRIBUTES)
            if conversation_id is None:
                assert isinstance(session_id, str)  # exactly one of them, checked above
                elsewhere = await self._submit_elsewhere(service, session_id, attributes)
                answer = elsewhere if elsewhere is not None else await service.submit(session_id, attributes)
            else:
                # a conversation by id: written with ``tenant``'s credential (None: the default tenant's)
                answer = await service.submit_conversation(conversation_id, attributes, tenant)
        except Refused as refused:
            error = _refusal(refused)
            done(error)
            raise error from None
        except ApiError as error:
            # a full queue (Backpressured) keeps its own fault and hint: tenant, queueDepth, limit, retryAfterSeconds
            done(error)
            raise
        publish("attributes.set", session_id, answer.update_id)(None)
        return answer.as_wire()

    async def list_mismatches(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        del publish  # reads change nothing
        everything = parameters.get("includeResolved", False)
        if not isinstance(everything, bool):
            raise _invalid("includeResolved", "includeResolved: expected a boolean")
        service = self._require(Method.LIST_MISMATCHES)
        try:
            return {"mismatches": await service.mismatches(include_resolved=everything)}
        except Refused as refused:
            raise _refusal(refused) from None

    async def resolve_mismatch(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        mismatch_id = parameters.get("mismatchId")
        if not isinstance(mismatch_id, int) or isinstance(mismatch_id, bool) or mismatch_id < 1:
            raise _invalid("mismatchId", "mismatchId: expected a positive integer")
        raw = parameters.get("resolution")
        if raw not in {r.value for r in Resolution}:
            raise _invalid("resolution", "resolution: expected 'resend' or 'accept-server'")
        target = f"{mismatch_id}:{raw}"
        try:
            service = self._require(Method.RESOLVE_MISMATCH)
            resolved = await service.resolve(mismatch_id, Resolution(raw))
        except Refused as refused:
            error = _refusal(refused)
            publish("mismatch.resolve", None, target)(error)
            raise error from None
        except ApiError as error:
            publish("mismatch.resolve", None, target)(error)
            raise
        publish("mismatch.resolve", resolved["sessionId"], target)(None)
        return {"mismatch": resolved}

    async def status(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        del publish, parameters
        return {"attributes": await self._require(Method.ATTRIBUTES_STATUS).status()}
