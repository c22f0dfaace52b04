"""The fault controller: holds injected faults, schedules them on the injected clock, and answers the
simulators' one question at every decision point (see :mod:`supervisor.sim.faults`, which documents
the public API and re-exports :class:`FaultController`).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Callable, Iterator
from typing import Any

from supervisor.clock import Clock, SystemClock
from supervisor.sim.fault_kinds import CONNECTION_KINDS, Fault, FaultKind

__all__ = ["FaultController"]


class _State:
    """Book-keeping of one injected fault (not part of the wire shape)."""

    __slots__ = ("admitted", "fired", "hits", "start", "stop", "window")

    def __init__(self, start: float, stop: float | None) -> None:
        self.start = start
        self.stop = stop
        self.hits = 0
        self.fired = False
        self.window = -1  # ADMISSION_LIMIT: the 1 s window being counted
        self.admitted = 0


class FaultController:
    """Holds injected faults; schedules them on the injected clock; answers :meth:`match`.

    Not thread-safe: use it from the simulator's event loop (the admin API does).
    """

    def __init__(self, clock: Clock | None = None, seed: int = 0) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._salt = random.Random(seed).getrandbits(64).to_bytes(8, "big")
        self._faults: dict[str, Fault] = {}
        self._state: dict[str, _State] = {}
        self._next = 1
        self._activate_hooks: list[Callable[[Fault], None]] = []
        self._clear_hooks: list[Callable[[Fault], None]] = []

    # -- hooks --------------------------------------------------------------------------------------

    def on_activate(self, hook: Callable[[Fault], None]) -> None:
        """Call ``hook(fault)`` when a fault starts (at injection when ``at`` is 0)."""
        self._activate_hooks.append(hook)

    def on_clear(self, hook: Callable[[Fault], None]) -> None:
        """Call ``hook(fault)`` when a fault is cleared, expires or is spent."""
        self._clear_hooks.append(hook)

    # -- injection ----------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        """Validate, assign an id, schedule; returns the stored fault (with ``id``)."""
        fault.validate()
        fault.id = f"f{self._next}"
        self._next += 1
        start = self._clock.monotonic() + fault.at
        stop = None if fault.duration_s is None else start + fault.duration_s
        self._faults[fault.id] = fault
        self._state[fault.id] = _State(start, stop)
        self.fire_due()
        return fault

    def clear(self, fault_id: str | None = None) -> int:
        """Remove one fault (by id) or all; returns how many were removed."""
        ids = list(self._faults) if fault_id is None else ([fault_id] if fault_id in self._faults else [])
        for fid in ids:
            self._drop(fid)
        return len(ids)

    def active(self) -> list[Fault]:
        """Faults injected and neither cleared, expired nor spent (pending ones included)."""
        self.fire_due()
        return list(self._faults.values())

    def describe(self) -> list[dict[str, Any]]:
        """JSON-able view of :meth:`active` with state (pending/active) and hits."""
        now = self._clock.monotonic()
        out = []
        for fault in self.active():
            assert fault.id is not None
            st = self._state[fault.id]
            item = fault.to_dict()
            item["state"] = "pending" if now < st.start else "active"
            item["hits"] = st.hits
            item["starts_in_s"] = max(0.0, round(st.start - now, 3))
            out.append(item)
        return out

    def hits(self, fault_id: str) -> int:
        """How many times the fault has applied so far (0 for an unknown id)."""
        st = self._state.get(fault_id)
        return 0 if st is None else st.hits

    # -- scheduling ---------------------------------------------------------------------------------

    def fire_due(self) -> None:
        """Start faults whose time has come (calling activation hooks) and end expired ones."""
        now = self._clock.monotonic()
        for fid in list(self._faults):
            fault, st = self._faults.get(fid), self._state.get(fid)
            if fault is None or st is None:
                continue
            if st.stop is not None and now >= st.stop:
                self._drop(fid)
                continue
            if not st.fired and now >= st.start:
                st.fired = True
                for hook in list(self._activate_hooks):
                    hook(fault)
                # a connection fault without a duration is a one-shot event on open connections
                if fid in self._faults and fault.duration_s is None and _one_shot(fault):
                    self._drop(fid)

    async def run(self, interval_s: float = 0.05) -> None:
        """Poll :meth:`fire_due` forever (the simulators run this as a background task)."""
        while True:
            self.fire_due()
            await asyncio.sleep(interval_s)

    # -- decisions ----------------------------------------------------------------------------------

    def selected(self, fault: Fault, session_key: str) -> bool:
        """Whether ``session_key`` is in the fault's share (deterministic, order-independent)."""
        if fault.share >= 1.0:
            return True
        if fault.share <= 0.0:
            return False
        digest = hashlib.blake2b(
            f"{fault.id}\x00{session_key}".encode(), key=self._salt, digest_size=8
        ).digest()
        return int.from_bytes(digest, "big") / 2.0**64 < fault.share

    def candidates(self, kind: FaultKind, session_key: str, endpoint: str = "") -> Iterator[Fault]:
        """Active faults of ``kind`` whose endpoint filter and share include this call (no hit counted)."""
        self.fire_due()
        now = self._clock.monotonic()
        for fid, fault in list(self._faults.items()):
            if fault.kind is not kind:
                continue
            st = self._state[fid]
            if now < st.start:
                continue
            if not fault.applies_to(endpoint):
                continue
            if not self.selected(fault, session_key):
                continue
            yield fault

    def match(self, kind: FaultKind, session_key: str, endpoint: str = "") -> Fault | None:
        """The first active fault of ``kind`` applying to this session and endpoint, counting one hit.

        A fault whose ``count`` is reached is spent and removed (``on_clear`` hooks run).
        """
        for fault in self.candidates(kind, session_key, endpoint):
            self.hit(fault)
            return fault
        return None

    def hit(self, fault: Fault) -> bool:
        """Count one hit of ``fault`` (match does this); spend it when ``count`` is reached.

        Returns False (and counts nothing) when the fault is no longer live, so an activation
        hook walking connections stops acting once ``count`` connections were hit.
        """
        if fault.id is None or fault.id not in self._state:
            return False
        st = self._state[fault.id]
        st.hits += 1
        if fault.count is not None and st.hits >= fault.count:
            self._drop(fault.id)
        return True

    def started_at(self, fault: Fault) -> float:
        """The clock's monotonic time at which ``fault`` starts (or started)."""
        assert fault.id is not None
        return self._state[fault.id].start

    def admission(self, session_key: str, endpoint: str) -> Fault | None:
        """ADMISSION_LIMIT: the fault refusing this handshake, or None to admit it.

        Each ADMISSION_LIMIT fault admits at most ``rate_per_s`` handshakes per clock second
        (fixed windows aligned on whole seconds of ``clock.time()``, the same buckets as the
        :class:`~supervisor.sim.recorder.Recorder`); the excess is refused and counts as a hit.
        """
        second = int(self._clock.time())
        refusing: Fault | None = None
        for fault in list(self.candidates(FaultKind.ADMISSION_LIMIT, session_key, endpoint)):
            assert fault.id is not None
            st = self._state[fault.id]
            if st.window != second:
                st.window, st.admitted = second, 0
            if st.admitted >= float(fault.params["rate_per_s"]):
                refusing = refusing or fault
                self.hit(fault)
        if refusing is None:
            for fault in self.candidates(FaultKind.ADMISSION_LIMIT, session_key, endpoint):
                assert fault.id is not None
                self._state[fault.id].admitted += 1
        return refusing

    # -- internals ----------------------------------------------------------------------------------

    def _drop(self, fault_id: str) -> None:
        fault = self._faults.pop(fault_id, None)
        self._state.pop(fault_id, None)
        if fault is not None:
            for hook in list(self._clear_hooks):
                hook(fault)


def _one_shot(fault: Fault) -> bool:
    if fault.kind not in CONNECTION_KINDS or fault.kind is FaultKind.BLACKHOLE:
        return False
    return fault.kind is not FaultKind.SESSION_EXPIRED or fault.params.get("mode") == "event"
