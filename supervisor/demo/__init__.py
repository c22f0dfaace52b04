"""``session-supervisor demo``: both simulators in-process, the daemon supervising them, a scenario.

See docs/demo.md. :func:`run_demo` is the Python entry point; the scenarios are data in
:mod:`supervisor.demo.scenarios`.
"""

from __future__ import annotations

from supervisor.demo.runner import DemoOptions, run_demo
from supervisor.demo.scenarios import DEFAULT_SCENARIO, SCENARIOS, Scenario

__all__ = ["DEFAULT_SCENARIO", "SCENARIOS", "DemoOptions", "Scenario", "run_demo"]
