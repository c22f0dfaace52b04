"""The fleet: several daemons (members) sharing the sessions through one PostgreSQL store (docs/runtime.md).

Each member holds leases on some of the 256 shards and runs only their sessions (docs/runtime.md,
"Shards and leases"). This package holds what the members share beside the store: the bus they tell
each other things on (:mod:`supervisor.fleet.bus`), who owns a shard (:mod:`supervisor.fleet.owners`),
the fleet as ``ctl status`` shows it (:mod:`supervisor.fleet.view`), the desired state of a session
another member owns, written for it (:mod:`supervisor.fleet.desired`), and the owner's side that
follows those writes (:mod:`supervisor.fleet.follow`).
"""
