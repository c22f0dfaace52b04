"""Ending the server-side sessions a crash left open and nobody wants any more (seed section 3).

"Orphaned sessions inflate billing": after a restart, every server session of the session ledger
that is not closed and whose session will not run now (a fail-fast, ``ctl stop``, removed from the
configuration) is ended on the server where the platform allows it, and the outcome is recorded
(``SESSION_RECONCILED``) and kept in the ledger. A session that is still desired is never ended
here: it is taken over (Web Messaging resumes its guest token; a CXone start that meets the agent's
live session joins it).

| kind | how it is ended | what cannot be |
|---|---|---|
| Web Messaging guest | ``configureSession`` with the kept guest token, then ``closeSession`` (the guest protocol ends a session only on a connection that configured it) | a guest whose token was never confirmed open |
| CXone agent session | ``DELETE agent-sessions/{anchor}`` (the start or join answer's sessionId) | a start whose answer was never seen (the id is unknown) |
| Genesys notifications channel | (no API deletes a channel) | always: it expires with its token |
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio

from supervisor.boundary import SessionContext
from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.config import GenesysConfig, table_key
from supervisor.errors import CircuitOpenError, Fenced, OperationError, StoreError, TransportFailure
from supervisor.events import Correlation, Event
from supervisor.runtime.tenancy import scope_table, scope_tenant
from supervisor.runtime.wiring import Wiring
from supervisor.store import ServerSession, Store
from supervisor.store.shards import shard_of
from supervisor.taxonomy import Channel, Platform
from supervisor.vocabulary import CloseCode, parse_scope

__all__ = ["SessionReconciled", "end_orphan", "holds", "reconcile"]

ENDED = "ended"
ALREADY_GONE = "already_gone"
NOT_CLEANABLE = "not_cleanable"
FAILED = "failed"
#: how long ending one orphan may take
ORPHAN_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SessionReconciled(Event):
    """A server session a crash left open was ended (or could not be): ``outcome`` and why."""

    name: ClassVar[str] = "SESSION_RECONCILED"
    session_id: str
    platform: str
    kind: str
    outcome: str
    detail: str
    timestamp: str

    def fields(self) -> dict[str, Any]:
        return {
            "timestamp": self.timestamp,
            "platform": self.platform,
            "kind": self.kind,
            "outcome": self.outcome,
            "detail": self.detail,
        }


async def reconcile(
    store: Store, orphans: list[ServerSession], wiring: Wiring, bus: EventBus, clock: Clock
) -> dict[str, str]:
    """End every orphan; returns session id -> outcome (each also published and recorded).

    A fleet member ends only the orphans of shards it holds at the moment it acts: the list was made
    when their shards were acquired, and a shard lost since (its deadline passed, a peer took it) is
    the new owner's to decide. Each end goes through the shard's fenced connections, so a deadline
    passing mid-way refuses the bytes (:class:`~supervisor.errors.Fenced`): that orphan is left as
    it is, nothing is written, and the shard's remaining orphans are skipped.
    """
    outcomes: dict[str, str] = {}
    for row in orphans:
        if not holds(wiring, row.session_id):
            continue  # the shard is not ours now: not one byte, not one write
        try:
            with anyio.move_on_after(ORPHAN_TIMEOUT_S) as bounded:
                outcome, detail = await end_orphan(row, wiring)
        except Fenced:
            continue  # the shard was lost mid-way: its next owner decides (no store write)
        if bounded.cancelled_caught:
            outcome, detail = FAILED, f"no answer within {ORPHAN_TIMEOUT_S:g} s"
        outcomes[row.session_id] = outcome
        bus.publish(
            SessionReconciled(row.session_id, row.platform, row.kind, outcome, detail, iso_utc(clock.time())),
            Correlation(row.session_id, row.agent_id, row.conversation_id),
        )
        if outcome != FAILED:
            # a store that cannot write leaves it open in the ledger: the next start tries again
            with contextlib.suppress(StoreError):
                await store.session_closed(row.session_id, f"{outcome}: {detail}", clock.time())
    return outcomes


def holds(wiring: Wiring, session_id: str) -> bool:
    """Whether this process may act for ``session_id`` now: always on one host (no fence); a fleet
    member while its shard's lease deadline has not passed (supervisor/runtime/fence.py)."""
    fence = wiring.fence
    return fence is None or not fence.guard(shard_of(session_id)).passed()


async def end_orphan(row: ServerSession, wiring: Wiring) -> tuple[str, str]:
    """End one orphaned server session where the platform allows; (outcome, detail)."""
    if row.kind == "webmessaging":
        return await _end_guest(row, wiring)
    if row.kind == "agent-session":
        return await _end_agent_session(row, wiring)
    return NOT_CLEANABLE, "a notifications channel cannot be deleted: it expires with its token"


async def _end_guest(row: ServerSession, wiring: Wiring) -> tuple[str, str]:
    from supervisor.transports.webmessaging import WebMessagingTransport

    # the row's scope: a named tenant's guest is ended on that tenant's org
    scope = parse_scope(row.platform) or Platform.GENESYS
    gen = scope_table(wiring.config, scope)
    at = table_key(scope_tenant(scope), Platform.GENESYS)
    if row.guest_token is None:
        return NOT_CLEANABLE, "no guest token was kept (the guest session was never confirmed open)"
    if not isinstance(gen, GenesysConfig) or gen.webmessaging_url is None or gen.deployment_id is None:
        return NOT_CLEANABLE, f"{at} (webmessagingUrl, deploymentId) is not configured"
    ctx = SessionContext(
        row.session_id,
        Platform.GENESYS,
        Channel.WEBMESSAGING,
        agent_id=row.agent_id,
        tenant=scope_tenant(scope),
    )
    transport = WebMessagingTransport(
        ctx,
        url=gen.webmessaging_url,
        deployment_id=gen.deployment_id,
        keepalive=gen.keepalive,
        executor=wiring.executor,
        guest_token=row.guest_token,
        resuming=True,
        stamp=wiring.stamper.for_shard(shard_of(row.session_id)),
        # a fleet member's: the guest's connection written through its shard's fence
        wire=wiring.wire_for(row.session_id),
    )
    try:
        connection = await transport.open()
    except OperationError:
        # newSession:true: the guest session had already expired (the one just made is left to expire)
        return ALREADY_GONE, "the guest session had expired"
    except TransportFailure as failure:
        return FAILED, f"could not connect ({failure.raw.status or 'network'})"
    await connection.close(CloseCode.NORMAL_CLOSURE)  # closeSession, closeAllConnections
    return ENDED, "closeSession sent with the kept guest token"


async def _end_agent_session(row: ServerSession, wiring: Wiring) -> tuple[str, str]:
    from supervisor.transports.cxone import AgentSessionTransport

    # the row's scope: a named tenant's agent session is ended with that tenant's access key
    scope = parse_scope(row.platform) or Platform.CXONE
    cx = scope_table(wiring.config, scope)
    api = wiring.cxone_apis.get(scope)
    # a fleet member's DELETE goes through its shard's pool, fenced by the shard's lease deadline
    pipeline = wiring.pipelines.get(scope)
    if pipeline is not None and wiring.fence is not None:
        pipeline = wiring.pipeline_for(scope, row.session_id)
    if row.platform_session_id is None:
        return NOT_CLEANABLE, "the start's answer was never seen: the agent session id is unknown"
    if cx is None or pipeline is None or api is None:
        return NOT_CLEANABLE, f"{table_key(scope_tenant(scope), Platform.CXONE)} is not configured"
    ctx = SessionContext(
        row.session_id,
        Platform.CXONE,
        Channel.AGENT_SESSION,
        agent_id=row.agent_id,
        tenant=scope_tenant(scope),
    )
    transport = AgentSessionTransport(ctx, pipeline=pipeline, api=api)
    try:
        await transport.end(row.platform_session_id)
    except OperationError as failure:
        status = failure.event.raw_status
        if status in (404, 409):
            return ALREADY_GONE, f"the platform answered {status}: the agent session had ended"
        return FAILED, f"DELETE failed: {failure.event.code}"
    except (CircuitOpenError, TransportFailure) as refused:
        return FAILED, f"DELETE not made: {refused}"
    return ENDED, "DELETE agent-sessions/{id}"
