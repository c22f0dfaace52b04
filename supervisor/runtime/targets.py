"""The attribute service's questions about sessions, answered from the supervisor (docs/attributes.md).

* :meth:`SessionTargets.accept`: may this session take an update now, and where does it go? A
  Genesys session that runs and knows its conversation (configured ``conversationId``, or one it
  learned), with a client credential: its tenant is that credential. Refused: an unknown session,
  a terminated or stopped one (``ctl start`` it first), one without a conversation, and CXone
  sessions (docs/attributes.md, "CXone": the daemon writes no CXone contact data).
* :meth:`SessionTargets.target`: where a queued write is sent, even after its session ended (the
  conversation outlives the guest connection: post-call wrap-up is when these are written).
* :meth:`SessionTargets.failed`: a fail-fast met while writing (QUEUE_FULL, a revoked token) goes to
  the session's machine, as for any REST call made for a session.

It reads the session table and the wiring it is given at construction (the Genesys pipeline and
client credential may change with a reload: they are read at each call).
"""

from __future__ import annotations

from collections.abc import Callable

from supervisor.attributes import Accepted, Refused
from supervisor.attributes.model import subject
from supervisor.attributes.platform import Target
from supervisor.boundary import SessionContext
from supervisor.config import GenesysConfig
from supervisor.runtime.sessions import SessionReader
from supervisor.runtime.tenancy import scope_of, scope_table
from supervisor.runtime.wiring import Wiring
from supervisor.store.shards import shard_of
from supervisor.taxonomy import Channel, Platform, SdkErrorEvent
from supervisor.vocabulary import ApiFault

__all__ = ["SessionTargets"]


class SessionTargets:
    """The attribute service's questions about sessions, answered from the session table."""

    def __init__(
        self, sessions: SessionReader, wiring: Wiring, down_reason: Callable[[str], str | None]
    ) -> None:
        self._sessions = sessions
        self._wiring = wiring
        # why the store says a session is down (stopped, or ended by a fail-fast before a restart)
        self._down_reason = down_reason

    def accept(self, session_id: str) -> Accepted:
        sessions = self._sessions
        spec = sessions.spec(session_id)
        runner = sessions.runners.get(session_id)
        if spec is None and runner is None:
            raise Refused(
                ApiFault.NO_SUCH_SESSION, f"no configured session '{session_id}'", sessionId=session_id
            )
        if spec is not None:
            platform = spec.platform
        else:
            assert runner is not None
            platform = runner.context.platform
        if platform is not Platform.GENESYS:
            raise Refused(
                ApiFault.UNSUPPORTED,
                f"session '{session_id}' is a CXone agent session: the daemon writes no CXone contact "
                "data (docs/attributes.md says why)",
                sessionId=session_id,
            )
        if runner is None or runner.core.terminated:
            ended = runner.termination if runner is not None else None
            why = (ended.reason.value if ended is not None else None) or self._down_reason(session_id)
            raise Refused(
                ApiFault.SESSION_TERMINATED,
                f"session '{session_id}' is terminated ({why or 'not running'}): start it again first (ctl start)",
                sessionId=session_id,
            )
        named = runner.context.tenant
        key = self._credential(named, sessionId=session_id)
        conversation = runner.context.conversation_id or (spec.conversation_id if spec is not None else None)
        if conversation is None:
            raise Refused(
                ApiFault.NO_CONVERSATION,
                f"session '{session_id}' has no known conversation (configure its conversationId)",
                sessionId=session_id,
            )
        return Accepted(key, conversation)

    def accept_elsewhere(self, session_id: str, conversation_id: str | None) -> Accepted:
        # another fleet member runs it: what this member knows is its configuration entry, and the
        # conversation the session ledger holds (its owner wrote it when the session opened)
        spec = self._sessions.spec(session_id)
        if spec is None:
            raise Refused(
                ApiFault.NO_SUCH_SESSION, f"no configured session '{session_id}'", sessionId=session_id
            )
        if spec.platform is not Platform.GENESYS:
            raise Refused(
                ApiFault.UNSUPPORTED,
                f"session '{session_id}' is a CXone agent session: the daemon writes no CXone contact "
                "data (docs/attributes.md says why)",
                sessionId=session_id,
            )
        key = self._credential(spec.tenant, sessionId=session_id)
        conversation = spec.conversation_id or conversation_id
        if conversation is None:
            raise Refused(
                ApiFault.NO_CONVERSATION,
                f"session '{session_id}' has no known conversation (configure its conversationId)",
                sessionId=session_id,
            )
        return Accepted(key, conversation)

    def accept_conversation(self, conversation_id: str, tenant: str | None = None) -> Accepted:
        # no session to ask: only the Genesys credential the writes go out with (``tenant``'s:
        # ``ctl attributes set --conversation ID --tenant T``; None: the default tenant's)
        return Accepted(self._credential(tenant, conversationId=conversation_id), conversation_id)

    def _credential(self, tenant: str | None, **where: str) -> str:
        """The queue key of ``tenant``'s Genesys client credential: ``genesys:<clientId>``, a named
        tenant's ``NAME/genesys:<clientId>`` (the store's ``tenant`` column; the default tenant's
        key is the one it always was, so updates pending in an existing store keep flowing)."""
        config = self._sessions.config
        if tenant is not None:
            table = config.tenants.get(tenant)
            if not isinstance(table, GenesysConfig):
                what = (
                    "no such tenant"
                    if table is None
                    else "a cxone tenant: the daemon writes no CXone contact data"
                )
                raise Refused(ApiFault.UNSUPPORTED, f"tenant '{tenant}': {what}", tenant=tenant, **where)
            if table.client_id is None:
                raise Refused(
                    ApiFault.UNSUPPORTED,
                    f"attribute updates need a Genesys client credential (tenants.{tenant}.clientId)",
                    **where,
                )
            return f"{tenant}/genesys:{table.client_id}"
        gen = config.platforms.genesys
        if gen is None or gen.client_id is None:
            raise Refused(
                ApiFault.UNSUPPORTED,
                "attribute updates need a Genesys client credential (platforms.genesys.clientId)",
                **where,
            )
        return f"genesys:{gen.client_id}"

    def target(self, tenant: str, session_id: str | None, conversation_id: str) -> Target | None:
        # ``tenant`` is the queue key (_credential): a named tenant's starts with its name and '/'
        named = None if tenant.startswith("genesys:") else tenant.split("/", 1)[0]
        scope = scope_of(named, Platform.GENESYS)
        pipeline = self._wiring.pipelines.get(scope)
        gen = scope_table(self._sessions.config, scope)
        if pipeline is None or not isinstance(gen, GenesysConfig):
            return None
        if self._wiring.fence is not None:
            # a fleet member's: the write goes on the pool of the row's shard (its session's, else its
            # conversation's: docs/store.md, "Shards"), fenced by that shard's lease deadline
            pipeline = self._wiring.shard_pipeline(scope, shard_of(session_id or conversation_id))
        runner = None if session_id is None else self._sessions.runners.get(session_id)
        agent = runner.context.agent_id if runner is not None else None
        ctx = SessionContext(
            subject(session_id, conversation_id),
            Platform.GENESYS,
            Channel.REST,
            agent_id=agent,
            conversation_id=conversation_id,
            tenant=named,
        )
        return Target(pipeline, gen.api_url, ctx)

    def failed(self, session_id: str, event: SdkErrorEvent) -> None:
        runner = self._sessions.runners.get(session_id)
        if runner is not None:
            runner.operation_failed(event)
