"""The rules a status is matched against, pre-merged per status when a taxonomy is compiled.

``Taxonomy.rules_for(status)`` must be every rule that can match the status (those naming it and
the wildcard rules), in file order: the first match wins, so the order is the routing. The buckets
are built in one pass over the rules (a pass per status cost a classify about 6 ms).
"""

from __future__ import annotations

import pytest

from supervisor.taxonomy import load_taxonomy

# every status the shipped rules name lies in here (HTTP statuses and WebSocket close/error codes)
STATUSES = range(6000)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_each_status_gets_the_rules_that_can_match_it_in_file_order(version: str) -> None:
    taxonomy = load_taxonomy(version)
    named = {s for rule in taxonomy.rules for s in rule.statuses or ()}
    assert named and named <= set(STATUSES)
    for status in [None, *STATUSES]:
        expected = tuple(
            rule
            for rule in taxonomy.rules
            if rule.statuses is None or (status is not None and status in rule.statuses)
        )
        assert taxonomy.rules_for(status) == expected, status
