"""The fleet: several daemons sharing their sessions through one PostgreSQL store (docs/runtime.md, "The fleet").

* :mod:`.shares`: the pure decisions, who is live, whose configuration the fleet runs, which free
  shards this member takes (rendezvous rank, a balanced share) and which it gives back (paced);
* :mod:`.identity`: a member's id and its configuration's digest;
* :mod:`.leases`: :class:`~supervisor.fleet.leases.PgLeases`, the leases kept in ``shard_leases``;
* :mod:`.events`: ``FLEET_DEGRADED`` and ``FLEET_RECOVERED``;
* :mod:`.member`: a ``[store] url`` daemon made a fleet member;
* :mod:`.bus`: the fleet bus (LISTEN/NOTIFY between members).
"""
