"""Which request a Web Messaging error reply answers, decided as Genesys' guest SDK decides it. Pure.

The platform's error replies carry no ``tracingId``: none of the vendor's error fixtures has one
(GMT = genesys-messenger-transport-mobile-sdk 2.14.0, ``transport/src/androidUnitTest/.../util/
Response.kt``: ``messageTooLong`` 4011, ``customAttributeSizeTooLarge`` 4013, ``tooManyRequests``
(class ``TooManyRequestsErrorMessage``, code 429, ``body.errorCode`` 4029), ``sessionExpired`` 4006,
``sessionNotFound`` 4007, ``cannotDowngradeToUnauthenticated`` 4017, ``unknownErrorEvent`` 5000).
GMT therefore matches them by code, not by id (``MessagingClientImpl.handleError``):

* 4011, 4013 and 4029 fail **the oldest message still sending** (``MessageStore.onMessageError``:
  ``activeConversation.find { it.state == Sending }``): only that message failed;
* 4006, 4007 and 4017 are the session's (``transitionToStateError``): no message is failed;
* pushed events (``SessionExpiredEvent``, ``ConnectionClosedEvent``, ...) answer nothing.

Beyond GMT [I]: GMT leaves a message answered by any other error reply (400, 403, 5000, ...)
sending forever; the daemon gives such a ``type:"response"`` reply to the oldest message still
waiting too (the platform answers one socket's requests in order), so it fails, or is retried,
on what the platform said instead of timing out. A reply that does carry a ``tracingId`` (WMJ's
``BaseMessage`` reads one where present) answers the request of that id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "ERROR_CLASSES",
    "MESSAGE_ERROR_CODES",
    "SESSION_ERROR_CODES",
    "answers_oldest_message",
    "is_failure",
]

# server classes that are failures or session-ending pushes (GMT MessagingClientImpl.SocketListener)
ERROR_CLASSES = frozenset(
    {
        "string",
        "TooManyRequestsErrorMessage",
        "SessionExpiredEvent",
        "ConnectionClosedEvent",
        "SessionClearedEvent",
        "LogoutEvent",
        "GenerateUrlError",
        "UploadFailureEvent",
    }
)
#: GMT handleError -> MessageStore.onMessageError: MessageTooLong, CustomAttributeSizeTooLarge,
#: RequestRateTooHigh
MESSAGE_ERROR_CODES = frozenset({4011, 4013, 4029})
#: GMT handleError -> transitionToStateError: SessionHasExpired, SessionNotFound,
#: CannotDowngradeToUnauthenticated
SESSION_ERROR_CODES = frozenset({4006, 4007, 4017})
_TOO_MANY_REQUESTS = "TooManyRequestsErrorMessage"


def is_failure(msg: Mapping[str, Any]) -> bool:
    """Whether a server frame is an error reply or a session-ending push."""
    return msg.get("class") in ERROR_CLASSES


def answers_oldest_message(msg: Mapping[str, Any]) -> bool:
    """Whether an error frame without a ``tracingId`` answers the oldest message still waiting.

    True for GMT's message errors (4011, 4013, 4029, ``TooManyRequestsErrorMessage``) and [I] for
    any other ``type:"response"`` error reply that is not the session's (module docstring).
    """
    cls = msg.get("class")
    if cls == _TOO_MANY_REQUESTS:
        return True
    if cls != "string":
        return False  # a pushed event (SessionExpiredEvent, ConnectionClosedEvent, ...) answers nothing
    code = msg.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return False
    if code in MESSAGE_ERROR_CODES:
        return True
    if code in SESSION_ERROR_CODES:
        return False
    return msg.get("type") == "response"
