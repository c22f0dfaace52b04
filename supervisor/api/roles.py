"""Who may do what on the control socket: three roles, one verb -> role table, peers mapped to roles. Pure.

Whoever could open the control socket used to get every verb (the docker.sock
lesson). Now each peer has a role, decided on accept from its credentials (``SO_PEERCRED``,
``SO_PEERGROUPS``), and each method needs one:

* **observer**: the read verbs (status, sessions, one session, mismatches, attribute status, and
  varlink's own ``GetInfo`` / ``GetInterfaceDescription``);
* **operator**: what acts on sessions and their messages: start, stop, add and remove sessions, set
  attributes, resolve a mismatch, send a message, set an agent's state;
* **administrator**: what acts on the daemon: drain, reload, switch the taxonomy, isolate, close
  and reset an endpoint's circuit.

Each role includes the ones below it. :data:`VERB_ROLES` is the one table; a method missing from
it needs the administrator role (closed by default; a test fails for any method without a row).

How a peer gets its role (``[sockets]``, docs/socket-api.md "Roles"): the daemon's own uid and
root are administrators. Otherwise the most specific listing decides: the peer's uid in
``operatorUids`` or ``observerUids`` (else ``controlAllowUids``: an administrator, as before roles
existed); else its groups, primary or supplementary: the highest role ``operatorGids`` and
``observerGids`` give them (else ``controlAllowGids``: an administrator). So a deployment that
names no role keeps every verb for everyone it let in before, and a role list narrows a peer
the older lists let in. A peer with no role is refused on accept, before any byte.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from supervisor.api.events import Peer
from supervisor.api.protocol import CONTROL, ApiFault, Method
from supervisor.errors import ApiError

__all__ = ["VERB_ROLES", "ControlRoles", "Role", "permission_denied", "required_role"]


class Role(enum.Enum):
    """A control socket role; each includes the ones before it."""

    OBSERVER = "observer"
    OPERATOR = "operator"
    ADMINISTRATOR = "administrator"

    @property
    def rank(self) -> int:
        return _RANKS[self]

    def may(self, needed: Role) -> bool:
        return self.rank >= needed.rank


_RANKS: Final = {Role.OBSERVER: 0, Role.OPERATOR: 1, Role.ADMINISTRATOR: 2}

#: every method the control socket serves -> the role it needs
VERB_ROLES: Final[Mapping[str, Role]] = {
    Method.GET_INFO: Role.OBSERVER,
    Method.GET_INTERFACE_DESCRIPTION: Role.OBSERVER,
    Method.STATUS: Role.OBSERVER,
    Method.LIST_SESSIONS: Role.OBSERVER,
    Method.SHOW_SESSION: Role.OBSERVER,
    Method.LIST_MISMATCHES: Role.OBSERVER,
    Method.ATTRIBUTES_STATUS: Role.OBSERVER,
    Method.START_SESSION: Role.OPERATOR,
    Method.STOP_SESSION: Role.OPERATOR,
    Method.SET_ATTRIBUTES: Role.OPERATOR,
    Method.RESOLVE_MISMATCH: Role.OPERATOR,
    Method.SEND_MESSAGE: Role.OPERATOR,
    Method.SET_AGENT_STATE: Role.OPERATOR,
    Method.ADD_SESSION: Role.OPERATOR,
    Method.REMOVE_SESSION: Role.OPERATOR,
    Method.DRAIN: Role.ADMINISTRATOR,
    Method.RELOAD: Role.ADMINISTRATOR,
    Method.USE_TAXONOMY: Role.ADMINISTRATOR,
    # an endpoint's circuit acts on every session that uses it: the daemon's, not a session's
    Method.ISOLATE_CIRCUIT: Role.ADMINISTRATOR,
    Method.CLOSE_CIRCUIT: Role.ADMINISTRATOR,
    Method.RESET_CIRCUIT: Role.ADMINISTRATOR,
}


def required_role(method: str) -> Role:
    """The role ``method`` needs; the administrator's for a method the table does not list."""
    return VERB_ROLES.get(method, Role.ADMINISTRATOR)


def permission_denied(method: str, needed: Role, granted: Role, peer: Peer) -> ApiError:
    short = method.removeprefix(CONTROL + ".")
    return ApiError(
        ApiFault.PERMISSION_DENIED,
        {
            "method": method,
            "role": needed.value,
            "granted": granted.value,
            "problem": f"{short} needs the {needed.value} role; uid {peer.uid} has the {granted.value} role",
        },
    )


@dataclass(frozen=True, slots=True)
class ControlRoles:
    """The control socket's peers and their roles (see the module docstring for the order)."""

    # the daemon's own uid and root
    always: frozenset[int]
    # controlAllowUids / controlAllowGids: administrators unless a role list names them
    admin_uids: frozenset[int] = frozenset()
    admin_gids: frozenset[int] = frozenset()
    operator_uids: frozenset[int] = frozenset()
    operator_gids: frozenset[int] = frozenset()
    observer_uids: frozenset[int] = frozenset()
    observer_gids: frozenset[int] = frozenset()

    def role_of(self, peer: Peer) -> Role | None:
        uid = peer.uid
        if uid in self.always:
            return Role.ADMINISTRATOR
        if uid in self.operator_uids:
            return Role.OPERATOR
        if uid in self.observer_uids:
            return Role.OBSERVER
        if uid in self.admin_uids:
            return Role.ADMINISTRATOR
        groups = {peer.gid, *peer.groups}
        if not groups.isdisjoint(self.operator_gids):
            return Role.OPERATOR
        if not groups.isdisjoint(self.observer_gids):
            return Role.OBSERVER
        if not groups.isdisjoint(self.admin_gids):
            return Role.ADMINISTRATOR
        return None

    def allows(self, peer: Peer) -> bool:
        """Whether the peer may connect at all: it has a role."""
        return self.role_of(peer) is not None
