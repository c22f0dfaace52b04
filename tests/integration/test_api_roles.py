"""Roles on the control socket, with real peer credentials.

Each client is a forked child that drops root for another uid (``os.setuid``), so the daemon reads
its real ``SO_PEERCRED`` and ``SO_PEERGROUPS``. The socket files belong to a group every child is in
(FILES_GID), so the file's mode lets each connect and only the peer check and the roles decide.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import ApiFault, Method
from supervisor.config import SocketsConfig
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import daemon_config, genesys_config
from tests.harness.in_process import Harness
from tests.harness.process import running_daemon
from tests.integration.api_harness import Conn, api_daemon, calls_as, cli_as

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root"),
    pytest.mark.genesys_sim(seed=23),
]

FILES_GID = 4250  # the socket files' group
OPS_GID = 4251  # operators, by group
OBSERVER, OPERATOR, LEGACY, OPS_MEMBER, BOTH, STRANGER = 12001, 12002, 12003, 12004, 12005, 12006

SOCKETS = SocketsConfig(
    group=FILES_GID,
    allow_uids=[OBSERVER, OPERATOR, LEGACY, BOTH],
    allow_gids=[OPS_GID],
    # as before roles: administrators
    control_allow_uids=[LEGACY, BOTH],
    observer_uids=[OBSERVER, BOTH],
    operator_uids=[OPERATOR],
    operator_gids=[OPS_GID],
)


async def as_uid(
    h: Harness, uid: int, calls: list[tuple[str, dict[str, Any]]], groups: tuple[int, ...] = ()
) -> list[tuple[str | None, dict[str, Any]]]:
    replies = await calls_as(h.control, calls, uid=uid, gid=FILES_GID, groups=[FILES_GID, *groups])
    assert not isinstance(replies, str), replies
    return replies


def denied(reply: tuple[str | None, dict[str, Any]], needed: str, granted: str) -> bool:
    error, parameters = reply
    return (error, parameters.get("role"), parameters.get("granted")) == (
        ApiFault.PERMISSION_DENIED,
        needed,
        granted,
    )


async def test_each_role_gets_its_verbs_and_a_refused_verb_reaches_nothing(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    stop = anyio.Event()
    async with api_daemon(genesys_config(genesys_sim.urls, 3), tmp_path, sockets=SOCKETS, stop=stop) as h:
        await h.wait(lambda: len(h.runners) == 3 and h.all_in("active"))
        os.chmod(h.control.parent, 0o711)  # the test's directory: let the other uids reach the files
        taxonomy = h.supervisor.wiring.classifier.taxonomy

        # an observer reads, and may do nothing else
        replies = await as_uid(
            h,
            OBSERVER,
            [
                (Method.STATUS, {}),
                (Method.LIST_SESSIONS, {}),
                (Method.STOP_SESSION, {"sessionId": "wm-0"}),
                (Method.DRAIN, {}),
                (Method.SET_ATTRIBUTES, {"sessionId": "wm-0", "attributes": {"k": "v"}}),
                # refused before its parameters are even looked at
                (Method.START_SESSION, {"sessionId": 7}),
            ],
        )
        assert replies[0][0] is None and replies[0][1]["sessions"]["total"] == 3
        assert replies[1][0] is None and len(replies[1][1]["sessions"]) == 3
        assert denied(replies[2], "operator", "observer") and denied(replies[3], "administrator", "observer")
        assert denied(replies[4], "operator", "observer") and denied(replies[5], "operator", "observer")
        assert (
            "StopSession needs the operator role; uid 12001 has the observer role" in replies[2][1]["problem"]
        )

        # an operator (by uid) stops a session, but neither drains nor switches the taxonomy
        replies = await as_uid(
            h,
            OPERATOR,
            [
                (Method.STOP_SESSION, {"sessionId": "wm-1"}),
                (Method.DRAIN, {}),
                (Method.USE_TAXONOMY, {"version": "v1"}),
                # ending every session on the platform is the administrator's drain too
                (Method.DRAIN, {"endSessions": True}),
            ],
        )
        assert replies[0] == (None, {"sessionId": "wm-1", "state": "terminated"})
        assert denied(replies[1], "administrator", "operator") and denied(
            replies[2], "administrator", "operator"
        )
        assert denied(replies[3], "administrator", "operator")
        assert not stop.is_set()  # refused: nothing drains

        # an operator by a supplementary group; listed both in controlAllowUids and observerUids: an observer
        replies = await as_uid(
            h, OPS_MEMBER, [(Method.STOP_SESSION, {"sessionId": "wm-2"}), (Method.RELOAD, {})], (OPS_GID,)
        )
        assert replies[0][0] is None and denied(replies[1], "administrator", "operator")
        replies = await as_uid(h, BOTH, [(Method.STOP_SESSION, {"sessionId": "wm-0"})])
        assert denied(replies[0], "operator", "observer")

        # controlAllowUids alone: an administrator, as before roles existed (Reload passes the role check)
        replies = await as_uid(h, LEGACY, [(Method.RELOAD, {}), (Method.USE_TAXONOMY, {"version": "v2"})])
        assert replies[0][0] == ApiFault.UNSUPPORTED and replies[1][0] is None

        # nobody listed: refused on accept, before any byte
        refused = await calls_as(
            h.control, [(Method.STATUS, {})], uid=STRANGER, gid=FILES_GID, groups=[FILES_GID]
        )
        assert refused == "closed after 0 replies"

        # what the refusals did: nothing
        assert h.runners["wm-0"].state.value == "active"
        assert not stop.is_set() and h.supervisor.wiring.classifier.taxonomy.version == taxonomy.version
        conn = await Conn.open(h.control)  # root: an administrator
        status = (await conn.call(Method.STATUS)).parameters
        await conn.aclose()
        assert status["sockets"]["control"]["deniedCalls"] == 9
        assert status["sockets"]["control"]["refusedPeers"] == 1

    commands = h.recorded.named("CONTROL_COMMAND")
    refusals = [
        (c["verb"], c["by"]["uid"], c.get("sessionId"), c.get("required")) for c in commands if not c["ok"]
    ]
    assert refusals == [
        ("stop", OBSERVER, "wm-0", "operator"),
        ("drain", OBSERVER, None, "administrator"),
        ("attributes.set", OBSERVER, "wm-0", "operator"),
        ("start", OBSERVER, None, "operator"),
        ("drain", OPERATOR, None, "administrator"),
        ("taxonomy.use", OPERATOR, None, "administrator"),
        ("drain", OPERATOR, None, "administrator"),
        ("reload", OPS_MEMBER, None, "administrator"),
        ("stop", BOTH, "wm-0", "operator"),
        # past the role check: the daemon has no reload function (its own refusal, no role in it)
        ("reload", LEGACY, None, None),
    ]
    assert all(c["error"] == ApiFault.PERMISSION_DENIED for c in commands if c.get("required"))
    done = [(c["verb"], c["by"]["uid"]) for c in commands if c["ok"]]
    assert done == [("stop", OPERATOR), ("stop", OPS_MEMBER), ("taxonomy.use", LEGACY)]


async def test_the_role_keys_in_a_config_file_with_ctl_run_as_other_users(
    genesys_sim: GenesysSimulator,
) -> None:
    """The contract as a script meets it: `run` with observerUids / operatorGids, `ctl` as those users."""
    conv = genesys_sim.create_conversation()
    with tempfile.TemporaryDirectory(prefix="ss-roles-", dir="/tmp") as d:
        workdir = Path(d)
        config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id)])
        roles = (
            f"group = {FILES_GID}\nallowUids = [{OBSERVER}]\nallowGids = [{OPS_GID}]\n"
            f"observerUids = [{OBSERVER}]\noperatorGids = [{OPS_GID}]\n"
        )
        config.write_text(config.read_text().replace("[sockets]\n", "[sockets]\n" + roles, 1))
        for directory in (workdir, workdir / "sockets"):
            os.chmod(directory, 0o711)
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(active=1)

            async def ctl(uid: int, *args: str, groups: tuple[int, ...] = ()) -> tuple[int, str, str]:
                return await cli_as(
                    ["ctl", "--socket", str(daemon.control), *args],
                    uid=uid,
                    gid=FILES_GID,
                    groups=[FILES_GID, *groups],
                )

            code, out, err = await ctl(OBSERVER, "status", "--json")
            assert (code, err) == (0, ""), err
            assert json.loads(out)["sessions"]["total"] == 1
            code, out, err = await ctl(OBSERVER, "stop", "wm-0")
            assert (code, out) == (1, "") and err == (
                "session-supervisor: error: io.sessionsupervisor.control.v1.PermissionDenied: "
                f"StopSession needs the operator role; uid {OBSERVER} has the observer role\n"
            )
            code, out, err = await ctl(OPS_MEMBER, "drain", groups=(OPS_GID,))
            assert code == 1 and "Drain needs the administrator role" in err and err.count("\n") == 1
            code, out, err = await ctl(OPS_MEMBER, "drain", "--end-sessions", groups=(OPS_GID,))
            assert code == 1 and "Drain needs the administrator role" in err and err.count("\n") == 1
            code, out, err = await ctl(OPS_MEMBER, "stop", "wm-0", groups=(OPS_GID,))
            assert (code, err) == (0, "") and "stopped wm-0" in out
            # not listed anywhere: the peer check closes without a byte, as before roles
            code, out, err = await ctl(STRANGER, "status")
            assert code == 1 and "closed the connection without answering" in err
            status = await daemon.acall(Method.STATUS)
            assert status["sockets"]["control"]["deniedCalls"] == 3
            code, out, err = await ctl(0, "status")  # root: what a person reads
            assert (code, err) == (0, "") and "1 peers refused, 3 calls denied for the caller's role" in out
            assert await daemon.stop() == 0
        assert daemon.err == ""
        refused = [
            (c["verb"], c["by"]["uid"], c["required"]) for c in daemon.named("CONTROL_COMMAND") if not c["ok"]
        ]
        assert refused == [
            ("stop", OBSERVER, "operator"),
            ("drain", OPS_MEMBER, "administrator"),
            ("drain", OPS_MEMBER, "administrator"),
        ]
