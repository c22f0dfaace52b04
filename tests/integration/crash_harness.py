"""The crash harness: drive attribute updates through the control socket, record every acknowledgement,
``kill -9`` the daemon, restart it, and check what survived (docs/robustness.md, "Durability").

Used by the CI test (named crash points, tests/integration/test_store_crash.py) and the benchmark
(random moments, tests/bench/bench_crash.py). After each restart:

* every acknowledged update reached the simulator (each of its keys holds its value, or the value
  of a later submission of the same key), or is flagged for manual reconciliation;
* no idempotency key was applied twice (the simulator saw each key once: nothing throttles here),
  and none more often than the ledger counted;
* ``PRAGMA integrity_check`` is ok.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import anyio

from supervisor.api.protocol import Method
from supervisor.errors import ApiError, ApiUnavailable
from supervisor.sim.genesys import GenesysSimulator
from tests.harness.process import Daemon, integrity, ledger_attempts


@dataclass
class Submitted:
    n: int
    session: str
    conversation: str
    attributes: dict[str, str]
    update_id: str | None = None  # None: no answer came (the daemon died first)


@dataclass
class Driver:
    """Submits numbered updates round-robin to ``sessions``; remembers what was acknowledged."""

    sessions: list[tuple[str, str]]
    submitted: list[Submitted] = field(default_factory=list)
    next_n: int = 0

    @property
    def acknowledged(self) -> list[Submitted]:
        return [s for s in self.submitted if s.update_id is not None]

    def _next(self) -> Submitted:
        n = self.next_n
        self.next_n += 1
        session, conversation = self.sessions[n % len(self.sessions)]
        # one key every update shares per conversation (last write wins) and one of its own
        return Submitted(n, session, conversation, {"survey": f"v{n}", f"k{n}": f"x{n}"})

    async def drive(self, daemon: Daemon, count: int) -> bool:
        """Submit up to ``count`` updates; False when the daemon died under us."""
        for _ in range(count):
            item = self._next()
            self.submitted.append(item)
            try:
                answer = await daemon.acall(
                    Method.SET_ATTRIBUTES, {"sessionId": item.session, "attributes": item.attributes}
                )
            except (ApiUnavailable, OSError):
                return False
            except ApiError as error:
                if error.name.endswith(".Backpressure"):
                    await anyio.sleep(float(error.parameters.get("retryAfterSeconds", 1.0)))
                    continue  # refused, not acknowledged: a client tries again later
                raise
            assert answer["accepted"] is True and answer["updateId"]
            item.update_id = str(answer["updateId"])
        return True


def problems(driver: Driver, sim: GenesysSimulator, flagged: set[tuple[str, str]]) -> list[str]:
    """Acknowledged updates neither on the simulator nor flagged (see the module docstring).

    For each (conversation, key) some acknowledged update wrote, the server must hold the value of
    the last acknowledged one, or of a submission after it (its answer lost in a crash: committed,
    or not), unless that key is flagged. Earlier acknowledged values were superseded by our own
    later writes (last write wins), which is what the caller asked for.
    """
    writes: dict[tuple[str, str], list[tuple[int, str, bool]]] = {}
    for item in driver.submitted:
        for key, value in item.attributes.items():
            writes.setdefault((item.conversation, key), []).append(
                (item.n, value, item.update_id is not None)
            )
    out: list[str] = []
    for (conversation, key), seq in writes.items():
        acked = [n for n, _, ok in seq if ok]
        if not acked or (conversation, key) in flagged:
            continue
        allowed = {value for n, value, _ in seq if n >= acked[-1]}
        conv = sim.state.conversations.get(conversation)
        held = conv.customer().attributes.get(key) if conv is not None else None
        if held not in allowed:
            out.append(f"{conversation} {key}: the server holds {held!r}, expected one of {sorted(allowed)}")
    return out


def duplicates(sim: GenesysSimulator, store: Path) -> list[str]:
    """Idempotency keys the simulator saw twice, or more often than the ledger counted."""
    attempts = ledger_attempts(store)
    out = [f"{key} applied {n} times" for key, n in sim.recorder.idempotency_keys().items() if n > 1]
    out += [
        f"{key} seen {n} times, the ledger counted {attempts.get(key, 0)}"
        for key, n in sim.recorder.idempotency_keys().items()
        if n > attempts.get(key, 0)
    ]
    return out


async def flagged_keys(daemon: Daemon) -> set[tuple[str, str]]:
    listed = (await daemon.acall(Method.LIST_MISMATCHES, {"includeResolved": True}))["mismatches"]
    return {(m["conversationId"], m["key"]) for m in listed}


def integrity_ok(store: Path) -> bool:
    return integrity(store) == "ok"
