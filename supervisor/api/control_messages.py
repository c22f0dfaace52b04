"""The control socket's verbs on a live session's behalf: send a guest message, set the agent's state.

* ``SendMessage`` (Web Messaging): the message goes through the session's live connection and the one
  retry executor (supervisor/transports/webmessaging.py), with a client id (``clientId``, default a new
  UUID) it carries on every send. Answered with the platform's message id once the platform has the
  message: its echo, or, when the echo was lost, the guest history entry found by the client id.
* ``SetAgentState`` (CXone): ``POST agent-sessions/{id}/state`` (supervisor/transports/cxone.py); the
  platform answers 202 and the change arrives as an ``AgentState`` event on the session's poll.

Refusals are typed: ``NoSuchSession`` (not configured, or no runner), ``SessionTerminated``,
``SessionNotActive`` (connecting or reconnecting: nothing is queued for later), ``WrongSessionKind``
(a message on a CXone or notifications session, an agent state on a Genesys one),
``ReadOnlyConversation`` (the agent ended it: GMT refuses to send then, and so do we, before
sending), ``PlatformRejected`` (the taxonomy's code and the platform's status) and, for a message,
``SendUnconfirmed`` (no answer, and not found after). Every call is published as ``CONTROL_COMMAND``
(``send``, ``agent-state``), never with the text.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from supervisor.api.protocol import ApiFault, Method
from supervisor.errors import ApiError, CircuitOpenError, OperationError, SendUnconfirmed, SessionError
from supervisor.runtime.sessions import SessionMessaging, SessionReader
from supervisor.taxonomy import Channel
from supervisor.vocabulary import SessionState

__all__ = ["MAX_TEXT_CHARS", "MessageVerbs", "Publish"]

T = TypeVar("T")

#: the CONTROL_COMMAND of one call: publish(verb, session id, target)(error or None)
Publish = Callable[[str, str | None, str | None], Callable[[ApiError | None], None]]

#: the longest text a SendMessage carries; the platform's own limit is smaller (4011 "message too long")
MAX_TEXT_CHARS: Final = 32_768
_MAX_STATE_CHARS: Final = 64
_MAX_ID_CHARS: Final = 200


def _invalid(parameter: str, problem: str) -> ApiError:
    return ApiError(ApiFault.INVALID_PARAMETER, {"parameter": parameter, "problem": problem})


def _string(parameters: Mapping[str, Any], name: str, limit: int, *, optional: bool = False) -> str | None:
    value = parameters.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= limit or "\0" in value:
        raise _invalid(name, f"{name}: expected a string of 1 to {limit} characters")
    return value


class MessageVerbs:
    """The message and agent-state verbs of one control service; ``messaging`` None: not offered."""

    def __init__(self, sessions: SessionReader, messaging: SessionMessaging | None) -> None:
        self._sessions = sessions
        self._messaging = messaging

    def _require(self, method: str) -> SessionMessaging:
        if self._messaging is None:
            raise ApiError(
                ApiFault.UNSUPPORTED,
                {"method": method, "problem": "this daemon was started without session operations"},
            )
        return self._messaging

    def _live(self, session_id: str, channel: Channel, verb: str) -> None:
        """The typed refusal for a session that cannot take ``verb`` now, before anything is sent."""
        runner = self._sessions.runners.get(session_id)
        if runner is None:
            raise ApiError(
                ApiFault.NO_SUCH_SESSION,
                {"sessionId": session_id, "problem": f"no supervised session '{session_id}'"},
            )
        kind = runner.context.channel
        if kind is not channel:
            raise ApiError(
                ApiFault.WRONG_SESSION_KIND,
                {
                    "sessionId": session_id,
                    "kind": kind.value,
                    "problem": f"session '{session_id}' is a {kind.value} session: {verb} needs a {channel.value} one",
                },
            )
        if runner.core.terminated:
            raise ApiError(
                ApiFault.SESSION_TERMINATED,
                {
                    "sessionId": session_id,
                    "problem": f"session '{session_id}' is terminated; start it again to re-authenticate",
                },
            )
        if runner.state is not SessionState.ACTIVE:
            state = runner.state.value
            raise ApiError(
                ApiFault.SESSION_NOT_ACTIVE,
                {"sessionId": session_id, "state": state, "problem": f"session '{session_id}' is {state}"},
            )

    async def send_message(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        session_id = _string(parameters, "sessionId", _MAX_ID_CHARS)
        text = _string(parameters, "text", MAX_TEXT_CHARS)
        client_id = _string(parameters, "clientId", _MAX_ID_CHARS, optional=True) or str(uuid.uuid4())
        assert session_id is not None and text is not None
        done = publish("send", session_id, client_id)
        try:
            messaging = self._require(Method.SEND_MESSAGE)
            self._live(session_id, Channel.WEBMESSAGING, "SendMessage")
            runner = self._sessions.runners[session_id]
            if runner.read_only:
                raise ApiError(
                    ApiFault.READ_ONLY_CONVERSATION,
                    {
                        "sessionId": session_id,
                        "problem": f"session '{session_id}': the agent ended the conversation (read-only)",
                    },
                )
            answer = await _refused(session_id, messaging.send_message(session_id, text, client_id=client_id))
        except ApiError as error:
            done(error)
            raise
        done(None)
        message_id = answer.get("id")
        return {
            "sessionId": session_id,
            "messageId": message_id if isinstance(message_id, str) else "",
            "clientId": client_id,
        }

    async def set_agent_state(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        session_id = _string(parameters, "sessionId", _MAX_ID_CHARS)
        state = _string(parameters, "state", _MAX_STATE_CHARS)
        reason = _string(parameters, "reason", _MAX_STATE_CHARS, optional=True)
        assert session_id is not None and state is not None
        done = publish("agent-state", session_id, state)
        try:
            messaging = self._require(Method.SET_AGENT_STATE)
            self._live(session_id, Channel.AGENT_SESSION, "SetAgentState")
            await _refused(session_id, messaging.set_agent_state(session_id, state, reason))
        except ApiError as error:
            done(error)
            raise
        done(None)
        return {"sessionId": session_id, "state": state, "reason": reason, "accepted": True}


async def _refused(session_id: str, operation: Awaitable[T]) -> T:
    """Await ``operation``; its failures as the typed errors of the module docstring."""
    try:
        return await operation
    except SendUnconfirmed as unconfirmed:
        again = " (sent twice with that id)" if unconfirmed.resent else ""
        raise ApiError(
            ApiFault.SEND_UNCONFIRMED,
            {
                "sessionId": session_id,
                "clientId": unconfirmed.client_id,
                "resent": unconfirmed.resent,
                "problem": (
                    f"no answer from the platform, and the message was not found after{again}: "
                    "it may or may not have arrived"
                ),
            },
        ) from None
    except OperationError as failure:
        event = failure.event
        code = str(getattr(event, "code", "UNKNOWN"))
        status = getattr(event, "raw_status", None)
        raise ApiError(
            ApiFault.PLATFORM_REJECTED,
            {
                "sessionId": session_id,
                "code": code,
                "status": status if isinstance(status, int) else None,
                "problem": f"the platform refused it: {code}"
                + (f" ({status})" if isinstance(status, int) else ""),
            },
        ) from None
    except CircuitOpenError as refused:
        raise ApiError(
            ApiFault.PLATFORM_REJECTED,
            {
                "sessionId": session_id,
                "code": "CIRCUIT_OPEN",
                "status": None,
                "problem": str(refused),
            },
        ) from None
    except SessionError as error:
        # the session changed between the checks and the send (dropped, stopped)
        raise ApiError(
            ApiFault.SESSION_NOT_ACTIVE,
            {"sessionId": session_id, "state": "unknown", "problem": str(error)},
        ) from None
