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


class _Recovered:
    """An observer whose sessions are all back (what `_Run._recovered` reads of one)."""

    disrupted: tuple[str, ...] = ()

    def count(self, state: str) -> int:
        return 0

    def all_survivors_active(self) -> bool:
        return True


class _NoCountedFaults:
    class faults:  # the attribute a simulator has
        @staticmethod
        def active() -> list[object]:
            return []


def test_the_live_view_names_what_a_recovered_run_still_waits_for_and_the_time_left() -> None:
    """Found by a first-time user: the default demo sat on "fault injected" for about 60 s while
    its tokens aged. Once the outcome is reached and only the scenario's hold is left, the phase
    says what the run waits for and how long."""
    from supervisor.clock import FakeClock
    from supervisor.demo.runner import DemoOptions, _Run
    from supervisor.demo.scenarios import SCENARIOS

    scenario = SCENARIOS["token-expiry"]
    run = _Run(DemoOptions(scenario="token-expiry", fast=True), scenario, FAST)
    clock = FakeClock()
    run.clock = clock  # type: ignore[assignment]
    run.phase = "fault injected"
    hold = scenario.hold(FAST)
    observer, sim = _Recovered(), _NoCountedFaults()
    assert not run._settled(observer, sim, sim, since=clock.monotonic())  # type: ignore[arg-type]
    assert run.phase == f"waiting for tokens to age past their refresh ({hold:.0f} s left)"
    clock.advance(hold - 2.6)
    assert not run._settled(observer, sim, sim, since=0.0)  # type: ignore[arg-type]
    assert run.phase == "waiting for tokens to age past their refresh (3 s left)"
    clock.advance(2.6)
    assert run._settled(observer, sim, sim, since=0.0)  # type: ignore[arg-type]
