"""Events of a fleet member, published on the bus like every other (supervisor/events.py). Pure.

``FLEET_DEGRADED`` says the member cannot hold shards as it should (it names the member and the
problem: the database unreachable, its configuration's digest not the fleet's); it runs the sessions
of the shards it still holds until their deadlines, takes no new one, and is not restarted (a restart
would not cure either). ``FLEET_RECOVERED`` says a later renewal reached the database with the
fleet's digest. The systemd glue turns the first into the ``fleet`` degraded condition and the
second back (supervisor/systemd/conditions.py, docs/systemd.md).
"""

from __future__ import annotations

from typing import ClassVar

from supervisor.events import StampedEvent

__all__ = ["FleetDegraded", "FleetRecovered"]


class FleetDegraded(StampedEvent, frozen=True):
    name: ClassVar[str] = "FLEET_DEGRADED"
    member: str
    problem: str


class FleetRecovered(StampedEvent, frozen=True):
    name: ClassVar[str] = "FLEET_RECOVERED"
    member: str
