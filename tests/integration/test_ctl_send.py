"""``ctl send`` and ``ctl agent-state`` as a script runs them (docs/socket-api.md, "SendMessage", "SetAgentState").

Every process is a real one (the daemon, each ``ctl``), against the simulators over loopback sockets.
The names and exit codes asserted are the interface scripts rely on: ``ctl send SESSION_ID TEXT --json``
answers ``{"sessionId", "messageId", "clientId"}`` (exit 0), ``ctl agent-state SESSION_ID STATE
[--reason R] --json`` answers ``{"sessionId", "state", "reason", "accepted"}``; a refusal is one line
naming its typed error, exit 1; bad usage exit 2. What the platform holds is read from the
simulator's own record (the conversation's transcript, the frames it received).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.sim.cxone.model import AgentStateName
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.sim.genesys.guest import MESSAGES_ROUTE
from tests.harness.config import daemon_config
from tests.harness.process import CLI, Daemon, running_daemon
from tests.harness.simulators import StartCxone

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=61),
]

# an unanswered send is given up on after openTimeout, and looked for sendCheckAfter later
GENESYS = {"open_timeout": 1.5, "send_check_after": 0.2}


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-send-", dir="/tmp") as d:
        yield Path(d)


async def ctl_text(daemon: Daemon, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process([*CLI, "ctl", "--socket", str(daemon.control), *args], check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def ctl(daemon: Daemon, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    """``ctl ARGS``: exit code, the one JSON object printed (``--json``), stderr."""
    code, out, err = await ctl_text(daemon, *args)
    return code, json.loads(out) if out.strip().startswith("{") else None, err


def stored(sim: GenesysSimulator, text: str) -> list[dict[str, Any]]:
    """Every message of that text the platform holds, in every conversation (its guest history)."""
    return [m for c in sim.state.conversations.all() for m in c.transcript if m.get("text") == text]


def sent_frames(sim: GenesysSimulator) -> int:
    return sim.recorder.ws_messages("webmessaging", "in", "onMessage")


async def test_send_answers_with_the_platform_message_id(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], genesys=GENESYS)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        code, answer, err = await ctl(daemon, "send", "wm-0", "hello there", "--json")
        assert code == 0, err
        assert answer is not None and answer["sessionId"] == "wm-0"
        (message,) = stored(genesys_sim, "hello there")
        assert answer["messageId"] == message["id"]
        # the client id went with the message (its metadata) and answers back
        assert uuid.UUID(answer["clientId"]) and message["metadata"]["customMessageId"] == answer["clientId"]
        # a chosen client id, and the plain text answer
        code, out, err = await ctl_text(daemon, "send", "wm-0", "second", "--client-id", "order-17")
        assert code == 0, err
        (second,) = stored(genesys_sim, "second")
        assert second["metadata"]["customMessageId"] == "order-17"
        assert out == f"sent on wm-0: message {second['id']}\n"
        assert sent_frames(genesys_sim) == 2


async def test_a_send_whose_answer_is_lost_is_found_and_delivered_once(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """The echo of the next message is black-holed: the platform stores it, the daemon hears nothing
    within openTimeout. It must not send it again blindly: it looks for its client id in the guest
    history, finds it there, and answers with that entry's id. The platform holds it once."""
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", None)], genesys=GENESYS)
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        genesys_sim.faults.inject(Fault(kind=FaultKind.DROP_ECHO, count=1))
        code, answer, err = await ctl(daemon, "send", "wm-0", "exactly once", "--json")
        assert code == 0, err
        assert answer is not None
        (message,) = stored(genesys_sim, "exactly once")  # the simulator's record: delivered once
        assert answer["messageId"] == message["id"]
        assert sent_frames(genesys_sim) == 1  # never re-sent: it was found
        assert genesys_sim.recorder.request_count("GET", MESSAGES_ROUTE, 200) == 1
        assert genesys_sim.recorder.events("echo_dropped") == 1
        # the session is unharmed: the next message is answered as usual
        code, _, err = await ctl(daemon, "send", "wm-0", "and then", "--json")
        assert code == 0, err
        assert len(stored(genesys_sim, "and then")) == 1


async def test_refused_for_an_unknown_session_a_cxone_one_and_a_read_only_conversation(
    genesys_sim: GenesysSimulator, workdir: Path, start_cxone: StartCxone
) -> None:
    cxone = await start_cxone(seed=62)
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None)],
        cxone=cxone.urls,
        cxone_sessions=[("cx-0", "100062")],
        genesys=GENESYS,
    )
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(2)
        code, _, err = await ctl(daemon, "send", "nope", "hello")
        assert code == 1 and ".NoSuchSession:" in err and err.count("\n") == 1
        code, answer, err = await ctl(daemon, "send", "cx-0", "hello", "--json")
        assert code == 1 and ".WrongSessionKind:" in err
        assert answer is not None and answer["error"].endswith(".WrongSessionKind")
        assert (answer["sessionId"], answer["kind"]) == ("cx-0", "agent-session")
        code, _, err = await ctl(daemon, "agent-state", "wm-0", "Available")
        assert code == 1 and ".WrongSessionKind:" in err
        # the agent ends the conversation: read-only (GMT refuses to send then)
        (conversation,) = genesys_sim.state.conversations.all()
        assert await genesys_sim.end_conversation(conversation.id)
        code, _, err = await ctl(daemon, "send", "wm-0", "too late")
        assert code == 1 and ".ReadOnlyConversation:" in err, err
        assert sent_frames(genesys_sim) == 0 and stored(genesys_sim, "too late") == []
        # bad usage: exit 2
        code, _, err = await ctl(daemon, "send", "wm-0")
        assert code == 2
        published = await daemon.arrived("CONTROL_COMMAND", lambda c: c.get("verb") == "send", count=3)
        assert [c.get("error", "").rsplit(".", 1)[-1] for c in published] == [
            "NoSuchSession",
            "WrongSessionKind",
            "ReadOnlyConversation",
        ]
        assert all("too late" not in json.dumps(c) for c in published)  # never the text


async def test_agent_state_reaches_the_platform_and_the_state_changes(
    genesys_sim: GenesysSimulator, workdir: Path, start_cxone: StartCxone
) -> None:
    cxone = await start_cxone(seed=63)
    config = daemon_config(
        genesys_sim.urls, workdir, [], cxone=cxone.urls, cxone_sessions=[("cx-0", "100063")]
    )
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        session = cxone.session_of("100063")
        assert session is not None and session.agent_state is AgentStateName.UNAVAILABLE  # at login
        code, out, err = await ctl_text(daemon, "agent-state", "cx-0", "Available")
        assert code == 0, err
        assert out == "agent state of cx-0: Available accepted\n"
        assert session.agent_state is AgentStateName.AVAILABLE
        code, answer, err = await ctl(
            daemon, "agent-state", "cx-0", "Unavailable", "--reason", "Break", "--json"
        )
        assert code == 0, err
        assert answer == {"sessionId": "cx-0", "state": "Unavailable", "reason": "Break", "accepted": True}
        assert session.agent_state is AgentStateName.UNAVAILABLE and session.reason == "Break"
        # a state the platform does not know: its refusal, with the taxonomy's code and its status
        code, answer, err = await ctl(daemon, "agent-state", "cx-0", "Napping", "--json")
        assert code == 1 and ".PlatformRejected:" in err
        assert answer is not None and answer["status"] == 400 and answer["code"]
        assert session.agent_state is AgentStateName.UNAVAILABLE and session.reason == "Break"
        # the session goes on: the platform's AgentState events were polled, nothing ended it
        code, answer, _ = await ctl(daemon, "show", "cx-0", "--json")
        assert code == 0 and answer is not None and answer["session"]["state"] == "active"
