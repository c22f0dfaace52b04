"""The attempt shells: the only callers of :class:`machines.endpoint.Endpoint` (docs/runtime.md, "One attempt path").

:mod:`supervisor.attempts.shell` is the runtime's async shell; the session runner, the retry
executor and the attribute sender make every attempt through it.
"""

from supervisor.attempts.shell import SILENT, Attempts, Flight, Gate, Late, Pending, Refused, Reports, Sleep

__all__ = ["SILENT", "Attempts", "Flight", "Gate", "Late", "Pending", "Refused", "Reports", "Sleep"]
