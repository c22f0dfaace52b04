"""``[daemon] stampMember``: the daemon stamps member and epoch on what it sends only when told to,
and the simulators' activity log shows it (supervisor/stamp.py; docs/simulators.md, "Activity log")."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.sim.activity import token_key
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.config import cxone_config, genesys_config, with_daemon
from tests.harness.in_process import supervised

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def stored(text: str, path: Path) -> str:
    return text + f'[store]\npath = "{path}"\nsynchronous = "normal"\n'


async def test_stamped_on_every_request_and_upgrade_with_the_store_epoch(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    for opened, guests in (
        (1, 2),
        (2, 1),
    ):  # each open of the store takes the next epoch, and the stamp follows it
        config = with_daemon(genesys_config(genesys_sim.urls, guests, notifications=1), stampMember="node-1")
        config = stored(config, tmp_path / "store.db")
        since = genesys_sim.activity.last_seq
        async with supervised(config, tmp_path, durable=True) as h:
            await h.wait_active(guests + 1)
            assert h.durable is not None and h.durable.store is not None
            assert h.durable.store.epoch == opened
            token = h.runners["wm-0"].transport.guest_token
        entries = genesys_sim.activity.since(since).entries
        listeners = {e["listener"] for e in entries}
        assert {"login", "api", "webmessaging", "streaming"} <= listeners
        assert {(e["member"], e["epoch"]) for e in entries} == {("node-1", opened)}
        frames = [e for e in entries if e["kind"] == "frame" and e["listener"] == "webmessaging"]
        if opened == 2:
            # wm-1 left the configuration: reconciliation ended its guest session, stamped like the rest
            ended = [e for e in frames if e["action"] == "closeSession"]
            assert len(ended) == 1 and ended[0]["session"] != token_key(token)
        else:
            assert frames and token_key(token) in {e["session"] for e in frames}


@pytest.mark.cxone_sim(seed=4)
async def test_never_stamped_by_default(cxone_sim: CxoneSimulator, tmp_path: Path) -> None:
    async with supervised(cxone_config(cxone_sim.urls, 1, poll_timeout=0), tmp_path) as h:
        await h.wait_active(1)
        await h.wait(lambda: any("handle" in e for e in cxone_sim.activity.since(0).entries))
    entries = cxone_sim.activity.since(0).entries
    assert entries and all(e["member"] is None and e["epoch"] is None for e in entries)
    polls = [e for e in entries if "handle" in e]
    assert {e["session"] for e in polls} == {"100001"}


async def test_a_shared_notifications_channel_is_stamped_too(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    config = with_daemon(genesys_config(genesys_sim.urls, 0, notifications=2), stampMember="node-2")
    config = config.replace("[platforms.genesys]\n", "[platforms.genesys]\nsharedChannels = true\n", 1)
    async with supervised(config, tmp_path) as h:
        await h.wait_active(2)
    entries = genesys_sim.activity.since(0).entries
    upgrades = [e for e in entries if e["listener"] == "streaming" and e["kind"] == "connect"]
    assert len(upgrades) == 1  # both agents on one shared channel
    assert {(e["member"], e["epoch"]) for e in entries} == {("node-2", 0)}  # no store: epoch 0
