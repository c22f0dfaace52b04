"""Acceptance: a burst of 200 attribute updates over 20 conversations, with silent drops and 429 storms.

Seed edge case 2 end to end, against the Genesys simulator: the platform answers 202 and then
silently drops updates past the 15th (``silent_drop_attributes``), and throttles both the writes
(429, ``Retry-After: 2``) and the read-backs (429 with an HTTP-date ``Retry-After``). At the end:

* every conversation's server attributes equal the last value submitted for each key, or that key
  is flagged for manual reconciliation; no acknowledged update is still pending (lost = 0);
* the simulator saw no idempotency key more often than the ledger counted its attempts;
* no request reached the tenant earlier than the Retry-After of a 429 it had answered;
* the queue's backpressure refused submissions (a client retries them after ``retryAfterSeconds``),
  one ``RATE_LIMIT_BACKPRESSURE`` per episode, each ended by a ``..._RELEASED``.

The simulator and the daemon share a fake clock: the executor's backoffs move it, and the sender
runs one conversation at a time here, so the simulator stamps every request exactly when it was
answered (the daemon's default is 4 at once).
"""

from __future__ import annotations

import email.utils
import math
from pathlib import Path
from typing import Any

import pytest

from supervisor.attributes import Backpressured
from supervisor.clock import FakeClock
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.store import UpdateOutcome
from tests.harness.clocks import advancing
from tests.harness.config import attributes_config
from tests.integration.attributes_harness import customer_attributes, durable_daemon

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=13, fake_clock=True),
]

CONVERSATIONS = 20
UPDATES = 200
PATCH_RETRY_AFTER_S = 2.0


class Requests:
    """Every API request the simulator answered, with its clock time (wraps its recorder)."""

    def __init__(self, sim: GenesysSimulator, clock: FakeClock) -> None:
        self.seen: list[tuple[float, str, str, int]] = []
        record = sim.recorder.record_request

        def wrapped(method: str, endpoint: str, status: int, **kw: Any) -> None:
            self.seen.append((clock.time(), method, endpoint, status))
            record(method, endpoint, status, **kw)

        sim.recorder.record_request = wrapped  # type: ignore[method-assign]

    def early(self) -> list[str]:
        """Requests that reached the tenant before the Retry-After of a 429 it had answered."""
        problems: list[str] = []
        for i, (t, method, endpoint, status) in enumerate(self.seen):
            if status != 429 or "/api/v2/conversations" not in endpoint:
                continue
            if method == "PATCH":
                not_before = t + PATCH_RETRY_AFTER_S
            else:
                # the HTTP-date the simulator sent: 5 s after the 429, in whole seconds (the
                # comparison allows 1 ms: the fake epoch clock is a float near 1.7e9)
                sent = email.utils.formatdate(t + 5, usegmt=True)
                not_before = email.utils.parsedate_to_datetime(sent).timestamp()
            for later, m, e, _ in self.seen[i + 1 :]:
                if "/api/v2/conversations" in e and later < not_before - 1e-3:
                    problems.append(f"{m} {e} at {later:.3f}, before {not_before:.3f} (429 at {t:.3f})")
        return problems


async def test_a_burst_of_200_updates_with_silent_drops_and_429_storms_loses_nothing(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    conversations = [
        genesys_sim.create_conversation(attributes={"survey": "unset"}).id for _ in range(CONVERSATIONS)
    ]
    text = attributes_config(genesys_sim.urls, conversations, store=tmp_path / "store.sqlite3")
    async with durable_daemon(text, tmp_path, clock=clock) as h:
        await h.wait_active(CONVERSATIONS)
        h.supervisor.wiring.executor._sleep = advancing(clock)  # backoffs move the shared fake clock
        h.service.scheduler._concurrency = 1
        requests = Requests(genesys_sim, clock)
        for fault in (
            Fault(kind=FaultKind.SILENT_DROP_ATTRIBUTES, params={"after": 15}, count=40),
            Fault(
                kind=FaultKind.RATE_LIMIT_STORM,
                endpoint="PATCH */attributes",
                count=30,
                params={"retry_after": str(int(PATCH_RETRY_AFTER_S))},
            ),
            Fault(
                kind=FaultKind.RATE_LIMIT_STORM,
                endpoint="GET /api/v2/conversations/*",
                count=20,
                params={"retry_after": "http-date"},
            ),
        ):
            genesys_sim.faults.inject(fault)
        last: dict[tuple[str, str], str] = {}
        refused: list[Backpressured] = []
        i = 0
        # the burst after call wrap-up: a well-behaved client retries what the queue refused
        while i < UPDATES:
            n = i % CONVERSATIONS
            update = {"survey": f"s{i}", "disposition": f"d{i}", f"note{i % 3}": f"n{i}"}
            try:
                await h.service.submit(f"wm-{n}", update)
            except Backpressured as full:
                refused.append(full)
                clock.advance(full.retry_after_s)
                await h.service.run_due()
                continue
            last.update({(conversations[n], key): value for key, value in update.items()})
            i += 1
        outcomes = await h.settle()
        store = h.durable.store
        assert store is not None

        # every acknowledged update is verified, repaired or flagged: none lost
        assert len(outcomes) == UPDATES
        assert UpdateOutcome.PENDING not in outcomes.values()
        flagged = {(m["conversationId"], m["key"]) for m in await h.service.mismatches()}
        for (conversation, key), value in last.items():
            held = customer_attributes(genesys_sim, conversation).get(key)
            assert held == value or (conversation, key) in flagged, (conversation, key, held, value)
        assert sum(genesys_sim.recorder.attributes_dropped(c) for c in conversations) >= 1
        assert UpdateOutcome.REPAIRED in outcomes.values()

        # the simulator saw no update sent more often than the ledger says
        attempts = {e.idempotency_key: e.attempts for e in (await store.ledger()).values()}
        seen = genesys_sim.recorder.idempotency_keys()
        assert seen and all(n <= attempts[key] for key, n in seen.items())

        # no retry earlier than Retry-After (seconds and HTTP-date)
        assert genesys_sim.recorder.request_count(status=429) >= 10
        early = requests.early()
        assert early == [], early[:5]

        # backpressure: refused (never dropped), one event per episode, each released
        assert refused and all(r.retry_after_s >= 1.0 and r.depth <= r.limit == 50 for r in refused)
        names = [n for _, n, _ in h.recorded.events if n.startswith("RATE_LIMIT_BACKPRESSURE")]
        assert names[::2] == ["RATE_LIMIT_BACKPRESSURE"] * math.ceil(len(names) / 2)
        assert names[1::2] == ["RATE_LIMIT_BACKPRESSURE_RELEASED"] * (len(names) // 2)
        assert names and sum(
            e["refused"] for e in h.recorded.named("RATE_LIMIT_BACKPRESSURE_RELEASED")
        ) <= len(refused)
        assert await store.integrity_check() == "ok"
