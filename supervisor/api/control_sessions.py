"""The control socket's verbs that change which sessions there are: ``AddSession``, ``RemoveSession``.

* ``AddSession(sessions)``: session entries as JSON objects, the configuration's ``[[sessions]]``
  fields (``id``, ``kind``, ``platform`` (implied by the kind when left out), ``agentId``,
  ``conversationId``, ``deploymentId``, ``stationId``, ``stationPhoneNumber``), each validated by the
  configuration's own check (supervisor/config.py, ``parse_session``): the same errors, located at
  ``sessions[i]``. At most :data:`MAX_SESSIONS_PER_CALL` entries per call (and the call within one
  64 KiB frame). Each entry is answered on its own: added (kept in the store, then started: its
  first attempt admitted by its endpoint as start-up's are), or refused (``InvalidSessionSpec``,
  ``SessionExists`` when the file or an earlier add has the id). Without a store nothing is added:
  ``NoStore`` (an added session must survive a restart).
* ``RemoveSession(sessionIds)``: each session added over the control socket is closed as ``stop``
  closes it (close 1000, CXone DELETE), waited for, and forgotten, its store row included. A
  session the file declares is refused (``ConfiguredSession``: edit the file and reload); an
  unknown id is ``NoSuchSession``.

Both are operator verbs (supervisor/api/roles.py); every entry is published as ``CONTROL_COMMAND``
(``sessions.add``, ``sessions.remove``), done or refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Final

from supervisor.api.control_messages import Publish
from supervisor.api.protocol import MAX_SESSIONS_PER_CALL, ApiFault
from supervisor.config import (
    GENESYS_CHANNELS_PER_CLIENT,
    GenesysConfig,
    SessionKind,
    SessionSpec,
    notification_capacity,
    parse_session,
    session_table,
)
from supervisor.errors import ApiError, ChannelLimit, ConfigError, StoreError
from supervisor.runtime.sessions import Origin, SessionControl, SessionReader

__all__ = ["MAX_SESSIONS_PER_CALL", "SessionVerbs"]

#: the origin named in the errors of an AddSession entry (as a file's path names a file's)
ORIGIN: Final = "AddSession"


def _channel_limit(index: int, spec: SessionSpec, client: str, capacity: int) -> ApiError:
    """``ChannelLimit``: the notifications session would need one more channel than the client may hold."""
    per_channel = capacity // GENESYS_CHANNELS_PER_CLIENT
    limit = ChannelLimit(client, GENESYS_CHANNELS_PER_CLIENT, per_channel)
    return ApiError(
        ApiFault.CHANNEL_LIMIT,
        {
            "index": index,
            "sessionId": spec.id,
            "channels": GENESYS_CHANNELS_PER_CLIENT,
            "topics": per_channel,
            "problem": f"{ORIGIN}: sessions[{index}].kind: notifications session '{spec.id}' refused: {limit}",
        },
    )


def _refused(error: ApiError) -> dict[str, Any]:
    return {"added": False, "error": error.name, **error.parameters}


class SessionVerbs:
    """AddSession and RemoveSession of one control service (module docstring)."""

    def __init__(self, sessions: SessionReader, operations: SessionControl) -> None:
        self._sessions = sessions
        self._operations = operations

    async def add_sessions(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        entries = parameters.get("sessions")
        if not isinstance(entries, list) or not 0 < len(entries) <= MAX_SESSIONS_PER_CALL:
            raise ApiError(
                ApiFault.INVALID_PARAMETER,
                {
                    "parameter": "sessions",
                    "problem": f"sessions: expected 1 to {MAX_SESSIONS_PER_CALL} session entries per call",
                },
            )
        sessions = self._sessions
        config = sessions.config
        # per tenant: Genesys' channel limit is per OAuth client, one per tenant
        notifications = Counter(
            spec.tenant
            for spec in [*config.sessions, *sessions.added.values()]
            if spec.kind is SessionKind.NOTIFICATIONS
        )
        results: list[dict[str, Any] | None] = []
        accepted: list[tuple[int, SessionSpec]] = []
        taken: set[str] = set()
        for index, raw in enumerate(entries):
            try:
                # the channel limit is checked below, where it has an error of its own
                spec = parse_session(raw, config, ORIGIN, f"sessions[{index}]", notifications=0)
                # the session's tenant's client: each tenant's channels are its own (docs/configuration.md)
                genesys = session_table(config, spec)
                if spec.kind is SessionKind.NOTIFICATIONS and isinstance(genesys, GenesysConfig):
                    capacity = notification_capacity(genesys)
                    if notifications[spec.tenant] + 1 > capacity:
                        client = genesys.client_id or ""
                        named = client if spec.tenant is None else f"{spec.tenant}/{client}"
                        raise _channel_limit(index, spec, named, capacity)
            except ApiError as limit:
                publish("sessions.add", spec.id, None)(limit)
                results.append(_refused(limit))
                continue
            except ConfigError as exc:
                given = raw.get("id") if isinstance(raw, dict) else None
                error = ApiError(
                    ApiFault.INVALID_SESSION_SPEC,
                    {
                        "index": index,
                        "sessionId": given if isinstance(given, str) else None,
                        "problem": str(exc),
                    },
                )
                publish(
                    "sessions.add", given if isinstance(given, str) and len(given) <= 200 else None, None
                )(error)
                results.append(_refused(error))
                continue
            origin = sessions.origin_of(spec.id)
            if origin is not None or spec.id in taken:
                by = origin.value if origin is not None else Origin.API.value
                error = ApiError(
                    ApiFault.SESSION_EXISTS,
                    {
                        "index": index,
                        "sessionId": spec.id,
                        "origin": by,
                        "problem": f"{ORIGIN}: sessions[{index}].id: session '{spec.id}' exists ({_said(by)})",
                    },
                )
                publish("sessions.add", spec.id, None)(error)
                results.append(_refused(error))
                continue
            if spec.kind is SessionKind.NOTIFICATIONS:
                notifications[spec.tenant] += 1
            taken.add(spec.id)
            accepted.append((index, spec))
            results.append(None)
        if accepted:
            try:
                runners = await self._operations.add_sessions([spec for _, spec in accepted])
            except StoreError as exc:
                error = ApiError(ApiFault.NO_STORE, {"problem": f"{ORIGIN}: {exc}; nothing was added"})
                for _, spec in accepted:
                    publish("sessions.add", spec.id, None)(error)
                raise error from None
            except ConfigError as exc:
                raise ApiError(ApiFault.NOT_ACCEPTING, {"problem": str(exc)}) from None
            for (index, spec), runner in zip(accepted, runners, strict=True):
                publish("sessions.add", spec.id, None)(None)
                results[index] = {
                    "added": True,
                    "sessionId": spec.id,
                    "platform": spec.platform.value,
                    "kind": spec.kind.value,
                    "state": runner.state.value,
                    "origin": Origin.API.value,
                }
        done = [r for r in results if r is not None]
        return {
            "results": done,
            "added": sum(1 for r in done if r["added"]),
            "refused": sum(1 for r in done if not r["added"]),
        }

    async def remove_sessions(self, publish: Publish, parameters: Mapping[str, Any]) -> dict[str, Any]:
        ids = parameters.get("sessionIds")
        if not isinstance(ids, list) or not 0 < len(ids) <= MAX_SESSIONS_PER_CALL:
            raise ApiError(
                ApiFault.INVALID_PARAMETER,
                {
                    "parameter": "sessionIds",
                    "problem": f"sessionIds: expected 1 to {MAX_SESSIONS_PER_CALL} session ids per call",
                },
            )
        results: list[dict[str, Any]] = []
        for session_id in ids:
            if not isinstance(session_id, str) or not 0 < len(session_id) <= 200:
                raise ApiError(
                    ApiFault.INVALID_PARAMETER,
                    {
                        "parameter": "sessionIds",
                        "problem": "sessionIds: each a string of 1 to 200 characters",
                    },
                )
        for session_id in ids:
            announce: Callable[[ApiError | None], None] = publish("sessions.remove", session_id, None)
            origin = self._sessions.origin_of(session_id)
            if origin is None:
                error = ApiError(
                    ApiFault.NO_SUCH_SESSION,
                    {"sessionId": session_id, "problem": f"no session '{session_id}' was added"},
                )
            elif origin is Origin.CONFIG:
                error = ApiError(
                    ApiFault.CONFIGURED_SESSION,
                    {
                        "sessionId": session_id,
                        "problem": f"session '{session_id}' is declared by the configuration file: "
                        "remove it there and reload",
                    },
                )
            else:
                announce(None)
                await self._operations.remove_session(session_id)
                results.append({"sessionId": session_id, "removed": True})
                continue
            announce(error)
            results.append(
                {"sessionId": session_id, "removed": False, "error": error.name, **error.parameters}
            )
        return {"results": results, "removed": sum(1 for r in results if r["removed"])}


def _said(origin: str) -> str:
    return (
        "declared by the configuration file"
        if origin == Origin.CONFIG.value
        else "added over the control socket"
    )
