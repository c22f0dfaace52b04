"""``ctl attributes set``, ``ctl mismatches`` and ``ctl resolve`` as a script runs them (docs/attributes.md).

The names and exit codes asserted here are the interface scripts rely on:
``session-supervisor ctl --socket PATH attributes set SESSION_ID KEY=VALUE ... --json`` exits 0 only
once the update is durably accepted (JSON ``accepted``, ``updateId``, ``coalesced``, ``queueDepth``),
75 when refused for backpressure (``retryAfterSeconds`` in the JSON answer), 1 for any other
refusal, 2 for bad usage. Every process here is a real one: the daemon, and each ``ctl``.
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

from supervisor.api.protocol import Method
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import CLI, Daemon, running_daemon
from tests.harness.simulators import StartCxone
from tests.harness.waits import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=51),
]

SECRET = "123-45-6789"


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-cli-", dir="/tmp") as d:
        yield Path(d)


async def ctl(daemon: Daemon, *args: str) -> tuple[int, dict[str, Any] | None, str]:
    done = await anyio.run_process([*CLI, "ctl", "--socket", str(daemon.control), *args], check=False)
    out = done.stdout.decode()
    return done.returncode, json.loads(out) if out.strip().startswith("{") else None, done.stderr.decode()


async def test_attributes_set_exits_0_75_1_2_with_the_json_scripts_rely_on(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    conv = genesys_sim.create_conversation()
    config = daemon_config(
        genesys_sim.urls, workdir, [("wm-0", conv.id)], store=workdir / "store.sqlite3", queue_depth=3
    )
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        # hold the sender in its first read, so what is queued stays queued
        hole = genesys_sim.faults.inject(
            Fault(kind=FaultKind.BLACKHOLE, endpoint="GET /api/v2/conversations/*")
        )
        code, first, err = await ctl(daemon, "attributes", "set", "wm-0", "survey=a", "--json")
        assert code == 0, err
        assert first is not None and first["accepted"] is True and first["coalesced"] is False
        assert first["queueDepth"] == 1 and uuid.UUID(first["updateId"])
        # the same attribute, not sent yet: last write wins, and the answer says so
        code, second, _ = await ctl(
            daemon, "attributes", "set", "wm-0", "survey=b", "disposition=x", "--json"
        )
        assert code == 0 and second is not None
        assert (second["coalesced"], second["queueDepth"]) == (True, 2)
        assert second["updateId"] != first["updateId"]
        code, _, _ = await ctl(daemon, "attributes", "set", "wm-0", "wrapup=1", "--json")
        assert code == 0
        # past the depth: try later, with a hint; twice, one event
        for _ in range(2):
            code, full, err = await ctl(daemon, "attributes", "set", "wm-0", "extra=1", "--json")
            assert code == 75, err
            assert full is not None and full["accepted"] is False and full["retryAfterSeconds"] >= 1
            assert full["queueDepth"] == 3 and full["error"].endswith(".Backpressure")
            assert err.count("\n") == 1 and "try again in" in err
        await wait_until(lambda: len(daemon.named("RATE_LIMIT_BACKPRESSURE")) == 1, 10)
        # the platform answers again: the queue drains and intake resumes
        genesys_sim.faults.clear(hole.id)
        await wait_until(lambda: bool(daemon.named("RATE_LIMIT_BACKPRESSURE_RELEASED")), 20)
        (released,) = daemon.named("RATE_LIMIT_BACKPRESSURE_RELEASED")
        assert released["refused"] == 2
        code, after, _ = await ctl(daemon, "attributes", "set", "wm-0", "extra=1", "--json")
        assert code == 0 and after is not None and after["accepted"] is True
        await daemon.settled()
        assert dict(conv.customer().attributes) == {
            "survey": "b",
            "disposition": "x",
            "wrapup": "1",
            "extra": "1",
        }
        assert len(daemon.named("RATE_LIMIT_BACKPRESSURE")) == 1

        # any other refusal: 1, one line naming the typed error
        code, refused, err = await ctl(daemon, "attributes", "set", "wm-9", "a=1", "--json")
        assert code == 1 and refused is not None and refused["error"].endswith(".NoSuchSession")
        assert (
            err
            == "session-supervisor: error: io.sessionsupervisor.control.v1.NoSuchSession: no configured session 'wm-9'\n"
        )
        # bad usage: 2, before the daemon is asked anything
        for args in (["wm-0", "novalue"], ["wm-0"], ["wm-0", "=x"], ["wm-0", "a=1", "a=2"]):
            code, _, err = await ctl(daemon, "attributes", "set", *args)
            assert code == 2 and err.startswith("session-supervisor: usage error:"), (args, err)
        assert await daemon.stop() == 0


async def test_mismatches_and_resolve_never_show_a_sensitive_value(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    gone = str(uuid.UUID(int=7, version=4))  # a conversation the platform does not know: 404
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", gone)],
        store=workdir / "store.sqlite3",
        extra='sensitive = ["ssn"]\n',
    )
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        code, _, err = await ctl(daemon, "attributes", "set", "wm-0", f"ssn={SECRET}", "note=hello", "--json")
        assert code == 0, err
        await daemon.settled()
        code, listed, _ = await ctl(daemon, "mismatches", "--json")
        assert code == 0 and listed is not None
        found = {m["key"]: m for m in listed["mismatches"]}
        assert set(found) == {"ssn", "note"}
        assert found["ssn"]["expected"] == found["ssn"]["server"] == "<sensitive>"
        assert (found["note"]["expected"], found["note"]["reason"]) == (
            "hello",
            "failed: CONVERSATION_NOT_FOUND",
        )
        (event,) = await daemon.arrived("ATTRIBUTE_MISMATCH")
        assert sorted(event["keys"]) == ["note", "ssn"] and event["conversationId"] == gone
        code, resolved, err = await ctl(
            daemon, "resolve", str(found["note"]["id"]), "--accept-server", "--json"
        )
        assert code == 0 and resolved is not None and resolved["mismatch"]["resolution"] == "accept-server"
        code, _, err = await ctl(daemon, "resolve", str(found["note"]["id"]), "--resend")
        assert code == 1 and ".AlreadyResolved:" in err
        code, _, err = await ctl(daemon, "resolve", "999", "--resend")
        assert code == 1 and ".NoSuchMismatch:" in err
        code, _, err = await ctl(daemon, "resolve", "1")
        assert code == 2
        code, _, _ = await ctl(daemon, "mismatches")
        assert code == 0
        code, everything, _ = await ctl(daemon, "mismatches", "--all", "--json")
        assert everything is not None and len(everything["mismatches"]) == 2
        assert await daemon.stop() == 0
        assert SECRET not in json.dumps(daemon.records) and SECRET not in daemon.err


async def test_a_cxone_session_is_refused_naming_why(
    genesys_sim: GenesysSimulator, workdir: Path, start_cxone: StartCxone
) -> None:
    """The daemon writes no CXone contact data (docs/attributes.md, "CXone"): `ctl attributes set`
    on a CXone session is refused in one line (Unsupported, exit 1), nothing is queued or sent."""
    cxone = await start_cxone(seed=52)
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [],
        store=workdir / "store.sqlite3",
        cxone=cxone.urls,
        cxone_sessions=[("cx-0", "100052")],
    )
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        code, answer, err = await ctl(daemon, "attributes", "set", "cx-0", "survey=yes", "--json")
        assert code == 1 and err.count("\n") == 1, err
        assert "Unsupported" in err and "writes no CXone contact data" in err
        assert answer is None or answer.get("accepted") is False
        code, status, _ = await ctl(daemon, "attributes", "status", "--json")
        assert code == 0 and status is not None
        assert (status["attributes"]["acknowledged"], status["attributes"]["scheduled"]) == (0, 0)
        assert await daemon.stop() == 0


async def test_an_update_by_conversation_id_with_no_session_is_written_read_back_and_verified(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """Post-call middleware: ``ctl attributes set --conversation ID`` with no supervised session at
    all; the update is written, read back and verified like a session's, and ``ctl attributes
    status`` says so. ``--platform cxone`` is refused (Unsupported, exit 1), nothing queued."""
    conv = genesys_sim.create_conversation()
    config = daemon_config(genesys_sim.urls, workdir, [], store=workdir / "store.sqlite3")
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(0)
        code, answer, err = await ctl(
            daemon, "attributes", "set", "--conversation", conv.id, "wrapup=sale", "survey=yes", "--json"
        )
        assert code == 0, err
        assert answer is not None and answer["accepted"] is True
        assert (answer["sessionId"], answer["conversationId"]) == (None, conv.id)
        await daemon.settled()
        assert dict(conv.customer().attributes) == {"wrapup": "sale", "survey": "yes"}
        code, status, _ = await ctl(daemon, "attributes", "status", "--json")
        assert code == 0 and status is not None
        assert status["attributes"]["rows"]["verified"] == 2 and status["attributes"]["acknowledged"] == 1
        # written once, then read back (a GET before the write, one after it to verify)
        assert genesys_sim.recorder.request_count(method="PATCH") == 1
        code, listed, _ = await ctl(daemon, "mismatches", "--json")
        assert listed == {"mismatches": []}

        code, refused, err = await ctl(
            daemon, "attributes", "set", "--conversation", conv.id, "--platform", "cxone", "a=1", "--json"
        )
        assert code == 1 and err.count("\n") == 1 and ".Unsupported:" in err, err
        assert "writes no CXone contact data" in err
        assert refused is not None and refused["accepted"] is False
        # a session id and --platform, or --conversation and no pair: bad usage, the daemon is not asked
        for args in (["wm-0", "--platform", "genesys", "a=1"], ["--conversation", conv.id]):
            code, _, err = await ctl(daemon, "attributes", "set", *args)
            assert code == 2 and err.startswith("session-supervisor: usage error:"), (args, err)
        code, status, _ = await ctl(daemon, "attributes", "status", "--json")
        assert status is not None and status["attributes"]["acknowledged"] == 1
        assert await daemon.stop() == 0


async def test_a_failed_read_of_a_conversation_with_no_session_flags_the_update_and_ends_nothing(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """The read before the write meets a fail-fast error (QUEUE_FULL, which ends a session whose
    update meets it): with no session the update is flagged, and the supervised session on another
    conversation stays active."""
    mine = genesys_sim.create_conversation()
    other = genesys_sim.create_conversation()
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", mine.id)], store=workdir / "store.sqlite3")
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(1)
        genesys_sim.faults.inject(
            Fault(kind=FaultKind.QUEUE_FULL, endpoint="GET /api/v2/conversations/{conversationId}", count=1)
        )
        code, _, err = await ctl(
            daemon, "attributes", "set", "--conversation", other.id, "note=hello", "--json"
        )
        assert code == 0, err
        await daemon.settled()
        code, listed, _ = await ctl(daemon, "mismatches", "--json")
        assert listed is not None
        (flagged,) = listed["mismatches"]
        assert (flagged["sessionId"], flagged["conversationId"], flagged["key"]) == (None, other.id, "note")
        assert flagged["reason"] == "failed: QUEUE_FULL"
        (event,) = await daemon.arrived("ATTRIBUTE_MISMATCH")
        assert event["conversationId"] == other.id and event["keys"] == ["note"]
        assert event["sessionId"] == f"conversation:{other.id}"  # the correlation, no session's id
        assert dict(other.customer().attributes) == {}
        # nothing ended: the one session is still active
        status = await daemon.acall(Method.STATUS)
        assert status["sessions"]["byState"] == {"active": 1}
        assert not daemon.named("SESSION_TERMINATED")
        assert await daemon.stop() == 0
