"""NICE CXone loopback simulator: token endpoints, Agent Session API with long polling, faults.

See ``docs/simulators-cxone.md`` and docs/platforms.md, "NICE CXone". Public API: :class:`CxoneSimulator`
and :class:`CxoneSimConfig`; the pure session model is :mod:`supervisor.sim.cxone.state`.
"""

from __future__ import annotations

from supervisor.sim.cxone.config import CxoneSimConfig, ErrorBody, load_config
from supervisor.sim.cxone.simulator import LISTENERS, CxoneSimulator

__all__ = ["LISTENERS", "CxoneSimConfig", "CxoneSimulator", "ErrorBody", "load_config"]
