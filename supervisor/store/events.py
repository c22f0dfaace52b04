"""Events of the durable store, published on the bus like every other (supervisor/events.py). Pure.

``STORE_DEGRADED`` says the store cannot persist (it names the file and the problem: a corrupt
or unreadable file, a full disk, a read-only state directory); from then on the daemon refuses
to acknowledge attribute updates, and its sessions keep running. ``STORE_RECOVERED`` says a
later commit succeeded. The systemd glue can turn the first into ``STATUS=`` (degraded) and the
second back (docs/robustness.md, "Fault matrix", row 21).
"""

from __future__ import annotations

from typing import ClassVar

from supervisor.events import StampedEvent

__all__ = ["StoreDegraded", "StoreRecovered"]


class StoreDegraded(StampedEvent, frozen=True):
    name: ClassVar[str] = "STORE_DEGRADED"
    path: str
    problem: str


class StoreRecovered(StampedEvent, frozen=True):
    name: ClassVar[str] = "STORE_RECOVERED"
    path: str
