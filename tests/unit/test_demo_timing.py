"""The demo's default --timeout (docs/demo.md): the timing's own up to 2,000 sessions, then in proportion."""

from __future__ import annotations

import pytest

from supervisor.demo.scenarios import FAST, REAL


@pytest.mark.parametrize(
    ("sessions", "real", "fast"),
    [(5, 180.0, 45.0), (2000, 180.0, 45.0), (5000, 450.0, 112.5), (10_000, 900.0, 225.0)],
)
def test_the_default_timeout_grows_past_two_thousand_sessions(
    sessions: int, real: float, fast: float
) -> None:
    assert (REAL.deadline_for(sessions), FAST.deadline_for(sessions)) == (real, fast)
