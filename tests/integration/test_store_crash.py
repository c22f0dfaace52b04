"""Crash test (CI): ``kill -9`` at each named crash point, restart, check what survived (docs/store.md).

The daemon runs as a child process against the Genesys simulator (in this process, on loopback);
a test-only hook (``SESSION_SUPERVISOR_TEST_CRASH_AT``) makes it SIGKILL itself exactly:

* ``after-outbox-commit``: an update is committed, its caller has no answer yet;
* ``after-send``: the request went out (and the platform stored it), the ledger says ``unknown``;
* ``after-answer``: the platform's 202 is in the ledger, the verification has not run.

Before the crash one session is stopped with ``ctl stop`` and one ended by a fail-fast (QUEUE_FULL
on its attribute write). After the restart: the desired sessions come back, resuming their guest
sessions (no new conversation is opened), the stopped and the failed ones stay down until
``ctl start``; every acknowledged update reached the simulator or is flagged; no idempotency key
was applied twice; ``PRAGMA integrity_check`` is ok. The random-moment version, ≥ 200 runs, is
tests/bench/bench_crash.py.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store.testhooks import CRASH_ENV, CrashPoint
from tests.harness.config import daemon_config
from tests.harness.process import running_daemon
from tests.harness.waits import wait_until
from tests.integration.crash_harness import Driver, duplicates, flagged_keys, integrity_ok, problems

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=31),
]


@pytest.fixture
def workdir() -> Iterator[Path]:
    # short: the control socket's path must fit sun_path (108 bytes)
    with tempfile.TemporaryDirectory(prefix="ss-crash-", dir="/tmp") as d:
        yield Path(d)


@pytest.mark.parametrize("point", list(CrashPoint), ids=[p.value for p in CrashPoint])
async def test_kill_9_at_a_crash_point_loses_no_acknowledged_update(
    genesys_sim: GenesysSimulator, workdir: Path, point: CrashPoint
) -> None:
    conversations = [genesys_sim.create_conversation(attributes={"survey": "unset"}).id for _ in range(4)]
    sessions = [(f"wm-{i}", c) for i, c in enumerate(conversations)]
    store = workdir / "store.sqlite3"
    config = daemon_config(genesys_sim.urls, workdir, sessions, store=store)
    # the 1st hit is the fail-fast set-up's (its submit, or its send): crash at the 6th
    async with running_daemon(config, env={CRASH_ENV: f"{point.value}:6"}) as first:
        await first.wait_ready(4)
        # wm-3's write meets QUEUE_FULL (a fail-fast trigger): the session ends, its write is flagged
        genesys_sim.faults.inject(Fault(kind=FaultKind.QUEUE_FULL, endpoint="PATCH */attributes", count=1))
        await first.acall(Method.SET_ATTRIBUTES, {"sessionId": "wm-3", "attributes": {"survey": "qf"}})
        await wait_until(lambda: bool(first.named("SESSION_TERMINATED")), 20)
        await first.acall(Method.STOP_SESSION, {"sessionId": "wm-2"})
        conversations_before = len(genesys_sim.state.conversations)
        driver = Driver([sessions[0], sessions[1]])
        await driver.drive(first, 40)
        # the crash point is reached while updates are driven, or just after (a send, an answer)
        with anyio.fail_after(30):
            code = await first.process.wait()
        assert code == -signal.SIGKILL, first.err
    assert driver.acknowledged, "nothing was acknowledged before the crash"

    async with running_daemon(config) as second:
        # the desired sessions come back; the stopped and the failed one do not
        await second.wait_ready(2)
        rows = (await second.acall(Method.LIST_SESSIONS))["sessions"]
        assert sorted((r["sessionId"], r["state"]) for r in rows) == [("wm-0", "active"), ("wm-1", "active")]
        # taken over, never ended: each resumed its guest session (newSession: false), no new conversation
        assert len(genesys_sim.state.conversations) == conversations_before
        assert not second.named("SESSION_TERMINATED")
        await second.settled()
        flagged = await flagged_keys(second)
        assert (conversations[3], "survey") in flagged  # the QUEUE_FULL write, flagged before the crash
        assert problems(driver, genesys_sim, flagged) == []
        assert duplicates(genesys_sim, store) == []
        started = await second.acall(Method.START_SESSION, {"sessionId": "wm-3"})
        assert started["reauthenticated"] is True
        await second.wait_ready(3)
        assert await second.stop() == 0
    assert integrity_ok(store)
