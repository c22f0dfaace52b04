"""A fleet member's test-only stamp carries each session's shard lease epoch (supervisor/stamp.py):
the guest's upgrade and frames, the agent's polls, each with the epoch of the lease its shard is held
at, and the new epoch once the shard is acquired again; the store's per-open epoch stays one host's.
The daemon runs in the test's process against both simulators over loopback, its leases set by the test.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.runtime.fence import WriteFence
from supervisor.sim.activity import token_key
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store.shards import shard_of
from tests.harness.config import daemon_config, with_daemon
from tests.harness.in_process import supervised
from tests.harness.leases import DeadlineLeases, ManualBoottime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=45),
    pytest.mark.cxone_sim(seed=45),
]

AGENT = "100001"
LEASE_EPOCH = 7


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-fst-", dir="/tmp") as d:
        yield Path(d)


def _epochs(entries: list[dict[str, Any]], key: str) -> set[tuple[str | None, int | None]]:
    """The stamps of the session's own requests (a token request is the member's, for every shard:
    it carries the store's epoch)."""
    return {(e["member"], e["epoch"]) for e in entries if e["session"] == key and e["listener"] != "auth"}


def test_the_sessions_of_this_test_lie_in_the_shards_it_means() -> None:
    assert shard_of("wm-0") != shard_of("cx-0")


async def test_a_members_requests_carry_their_shards_lease_epoch(
    genesys_sim: GenesysSimulator, cxone_sim: CxoneSimulator, workdir: Path
) -> None:
    config = daemon_config(
        genesys_sim.urls,
        workdir,
        [("wm-0", None)],
        store=workdir / "store.sqlite3",
        cxone=cxone_sim.urls,
        cxone_sessions=[("cx-0", AGENT)],
    )
    text = with_daemon(config.read_text(), stampMember="m1")
    now = ManualBoottime()
    cx_shard = shard_of("cx-0")
    leases = DeadlineLeases({shard_of("wm-0"), cx_shard}, now, margin=100.0, epoch=LEASE_EPOCH)
    fence = WriteFence(now=now, tick_s=0.02, loop_lag_s=600.0)
    async with supervised(text, workdir, durable=True, leases=leases, fence=fence) as daemon:
        await daemon.wait_active(2)
        assert daemon.durable is not None and daemon.durable.store is not None
        assert daemon.durable.store.epoch != LEASE_EPOCH  # the store's own epoch is another number
        await daemon.runners["wm-0"].send_message("hello")
        await daemon.wait(lambda: len(_epochs(cxone_sim.activity.since(0).entries, AGENT)) > 0)
        guest = token_key(daemon.runners["wm-0"].transport.guest_token)
        assert _epochs(genesys_sim.activity.since(0).entries, guest) == {("m1", LEASE_EPOCH)}
        assert _epochs(cxone_sim.activity.since(0).entries, AGENT) == {("m1", LEASE_EPOCH)}

        # the agent's shard is lost, then acquired again at the next epoch: its requests say so
        old = daemon.runners["cx-0"]
        await leases.lose({cx_shard})
        await daemon.wait(lambda: daemon.supervisor.finished(old))
        mark = cxone_sim.activity.last_seq
        await leases.give({cx_shard})
        await daemon.wait_active(2)
        await daemon.wait(lambda: len(_epochs(cxone_sim.activity.since(mark).entries, AGENT)) > 0)
        assert _epochs(cxone_sim.activity.since(mark).entries, AGENT) == {("m1", LEASE_EPOCH + 1)}
