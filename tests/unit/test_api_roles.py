"""Roles on the control socket (supervisor/api/roles.py): the verb table, and peers mapped to roles."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from supervisor.api.events import Peer
from supervisor.api.listen import policies
from supervisor.api.protocol import CONTROL, SERVICE, ApiFault, Method
from supervisor.api.roles import VERB_ROLES, ControlRoles, Role, permission_denied, required_role
from supervisor.config import SocketsConfig, parse_config
from supervisor.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "socket-api.md"
CONTROL_SOCKET_METHODS = {m.value for m in Method if m.value.startswith((CONTROL + ".", SERVICE + "."))}
OWN = 4242


def test_every_method_of_the_control_socket_has_a_role() -> None:
    """A verb added to the control interface without a row in VERB_ROLES fails here."""
    missing = CONTROL_SOCKET_METHODS - set(VERB_ROLES)
    assert missing == set()
    assert set(VERB_ROLES) <= CONTROL_SOCKET_METHODS  # no row for a method that is not served there


def test_a_method_without_a_row_needs_the_administrator() -> None:
    assert required_role(f"{CONTROL}.SomeVerbAddedLater") is Role.ADMINISTRATOR


def test_the_roles_the_issue_names() -> None:
    by_role: dict[Role, set[str]] = {}
    for method, role in VERB_ROLES.items():
        by_role.setdefault(role, set()).add(method.rsplit(".", 1)[1])
    assert by_role[Role.OBSERVER] == {
        "GetInfo",
        "GetInterfaceDescription",
        "Status",
        "ListSessions",
        "ShowSession",
        "ListMismatches",
        "AttributesStatus",
    }
    assert by_role[Role.OPERATOR] == {
        "StartSession",
        "StopSession",
        "SetAttributes",
        "ResolveMismatch",
        # on a live session's behalf: a guest message, an agent's state (operator verbs)
        "SendMessage",
        "SetAgentState",
        # sessions added and removed at run time (operator verbs)
        "AddSession",
        "RemoveSession",
    }
    # an endpoint's circuit acts on every session that uses it: the daemon's
    assert by_role[Role.ADMINISTRATOR] == {
        "Drain",
        "Reload",
        "UseTaxonomy",
        "IsolateCircuit",
        "CloseCircuit",
        "ResetCircuit",
    }


def test_each_role_includes_the_ones_below() -> None:
    assert Role.ADMINISTRATOR.may(Role.OPERATOR) and Role.ADMINISTRATOR.may(Role.OBSERVER)
    assert Role.OPERATOR.may(Role.OBSERVER) and not Role.OPERATOR.may(Role.ADMINISTRATOR)
    assert not Role.OBSERVER.may(Role.OPERATOR)


def test_the_docs_table_is_the_verb_table() -> None:
    """docs/socket-api.md, "Roles": one row per method, the role the code gives it."""
    text = DOCS.read_text()
    section = text[text.index("### Roles") :]
    section = section[: section.index("\n#", 1)]
    rows = re.findall(r"^\| `(\w+)` \|[^|]*\| (observer|operator|administrator) \|$", section, re.M)
    documented = dict(rows)
    assert len(rows) == len(documented)
    assert documented == {m.rsplit(".", 1)[1]: r.value for m, r in VERB_ROLES.items()}


def test_permission_denied_names_the_role_needed_and_the_one_held() -> None:
    error = permission_denied(Method.DRAIN, Role.ADMINISTRATOR, Role.OPERATOR, Peer(9, 1001, 1001))
    assert error.name == ApiFault.PERMISSION_DENIED
    assert (error.parameters["role"], error.parameters["granted"]) == ("administrator", "operator")
    assert (
        str(error.parameters["problem"])
        == "Drain needs the administrator role; uid 1001 has the operator role"
    )


def roles(**sockets: list[int]) -> ControlRoles:
    return policies(SocketsConfig(**sockets), own_uid=OWN)[1]


def test_without_role_lists_everyone_let_in_is_an_administrator_as_before() -> None:
    control = roles(allow_uids=[1001], allow_gids=[900], control_allow_uids=[1001], control_allow_gids=[900])
    assert control.role_of(Peer(1, OWN, OWN)) is Role.ADMINISTRATOR
    assert control.role_of(Peer(1, 0, 0)) is Role.ADMINISTRATOR
    assert control.role_of(Peer(1, 1001, 1001)) is Role.ADMINISTRATOR
    assert control.role_of(Peer(1, 2000, 2000, (2000, 900))) is Role.ADMINISTRATOR
    assert control.role_of(Peer(1, 2000, 2000, (2000,))) is None and not control.allows(Peer(1, 2000, 2000))


def test_role_lists_let_peers_in_with_their_role() -> None:
    control = roles(
        allow_uids=[1001, 1002],
        allow_gids=[900, 901],
        observer_uids=[1001],
        operator_uids=[1002],
        observer_gids=[900],
        operator_gids=[901],
    )
    assert control.role_of(Peer(1, 1001, 1001)) is Role.OBSERVER
    assert control.role_of(Peer(1, 1002, 1002)) is Role.OPERATOR
    assert control.role_of(Peer(1, 3000, 900)) is Role.OBSERVER  # the primary group
    assert control.role_of(Peer(1, 3000, 3000, (3000, 901))) is Role.OPERATOR  # a supplementary one
    # in both groups: the higher role
    assert control.role_of(Peer(1, 3000, 3000, (900, 901))) is Role.OPERATOR


def test_the_most_specific_listing_decides() -> None:
    control = roles(
        allow_uids=[1001, 1002, 1003],
        allow_gids=[900, 901],
        control_allow_uids=[1001, 1003],
        control_allow_gids=[900],
        observer_uids=[1001],
        observer_gids=[901],
    )
    # controlAllowUids and observerUids: the role list names it
    assert control.role_of(Peer(1, 1001, 1001)) is Role.OBSERVER
    # a uid of its own in controlAllowUids stays an administrator whatever its groups
    assert control.role_of(Peer(1, 1003, 1003, (901,))) is Role.ADMINISTRATOR
    # by group: a role list's group before controlAllowGids
    assert control.role_of(Peer(1, 3000, 3000, (900, 901))) is Role.OBSERVER
    assert control.role_of(Peer(1, 3000, 3000, (900,))) is Role.ADMINISTRATOR
    # the daemon's own uid and root, even when a role list names them
    narrowed = roles(allow_uids=[0, OWN], observer_uids=[0, OWN])
    assert narrowed.role_of(Peer(1, 0, 0)) is Role.ADMINISTRATOR
    assert narrowed.role_of(Peer(1, OWN, OWN)) is Role.ADMINISTRATOR


def test_the_subscribe_socket_is_not_touched_by_roles() -> None:
    subscribe, _ = policies(SocketsConfig(allow_uids=[1001], observer_uids=[1001]), own_uid=OWN)
    assert subscribe.allows(Peer(1, 1001, 1001)) and not subscribe.allows(Peer(1, 1002, 1002))


def test_a_control_roles_table_from_scratch() -> None:
    assert ControlRoles(always=frozenset({OWN})).role_of(Peer(1, 5, 5)) is None


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ("observerUids = [5]", "observerUids must be a subset of allowUids"),
        ("operatorUids = [5]", "operatorUids must be a subset of allowUids"),
        ("observerGids = [5]", "observerGids must be a subset of allowGids"),
        ("operatorGids = [5]", "operatorGids must be a subset of allowGids"),
        (
            "allowUids = [5]\nobserverUids = [5]\noperatorUids = [5]",
            "uid 5 is in both observerUids and operatorUids",
        ),
        (
            "allowGids = [7]\nobserverGids = [7]\noperatorGids = [7]",
            "gid 7 is in both observerGids and operatorGids",
        ),
        ("observerUids = [-1]", "sockets.observerUids[0]: expected `int` >= 0"),
        ('operatorGids = "ops"', "sockets.operatorGids: expected `array`"),
    ],
)
def test_bad_role_lists_are_one_located_line(table: str, problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"[platforms]\n[sockets]\n{table}\n", "s.toml")
    assert problem in str(refused.value) and str(refused.value).startswith("s.toml: sockets")
    assert "\n" not in str(refused.value)


def test_the_role_keys_by_their_names() -> None:
    table = (
        "allowUids = [1, 2]\nallowGids = [3, 4]\nobserverUids = [1]\noperatorUids = [2]\n"
        "observerGids = [3]\noperatorGids = [4]\n"
    )
    sockets = parse_config(f"[platforms]\n[sockets]\n{table}", "s.toml").sockets
    assert (sockets.observer_uids, sockets.operator_uids) == ([1], [2])
    assert (sockets.observer_gids, sockets.operator_gids) == ([3], [4])
    defaults = parse_config("[platforms]\n", "s.toml").sockets
    assert defaults.observer_uids == defaults.operator_uids == []
    assert defaults.observer_gids == defaults.operator_gids == []
