"""Loopback simulators of Genesys Cloud and NICE CXone with fault injection (docs/simulators.md).

Shared modules: :mod:`supervisor.sim.faults` (what can go wrong; kinds and params in
:mod:`supervisor.sim.fault_kinds`, re-exported), :mod:`supervisor.sim.recorder` (what the
simulator saw), :mod:`supervisor.sim.admin` (the admin HTTP API over both) and
:mod:`supervisor.sim.serving` (listeners). Platforms: :mod:`supervisor.sim.genesys`,
:mod:`supervisor.sim.cxone`. See docs/simulators.md.
"""
