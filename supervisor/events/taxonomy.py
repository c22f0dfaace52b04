"""The taxonomy's own events at run time: a shadow version that routes a failure otherwise, and a
capture that stopped (docs/taxonomy.md, "Shadow" and "Capture"). Nothing here does I/O.
"""

from __future__ import annotations

from typing import ClassVar

from supervisor.events.base import StampedEvent

__all__ = ["ShadowDivergence", "TaxonomyCaptureFailed"]


class ShadowDivergence(StampedEvent, frozen=True):
    """``[taxonomy] shadow``: ``count`` failures the active version routed to ``active_code`` and the
    shadow version to ``shadow_code`` since this pair's last report (at most one a ``period_s``);
    ``changed`` names what differs (as ``taxonomy diff`` does). The daemon routed them by the active one."""

    name: ClassVar[str] = "SHADOW_DIVERGENCE"
    active_version: str
    shadow_version: str
    active_code: str
    shadow_code: str
    count: int
    changed: tuple[str, ...]
    period_s: float


class TaxonomyCaptureFailed(StampedEvent, frozen=True):
    """``[taxonomy] capture`` could not write ``path`` (``problem``): capture is off until the daemon
    restarts, after ``captured`` lines; the sessions go on. Published once."""

    name: ClassVar[str] = "TAXONOMY_CAPTURE_FAILED"
    path: str
    problem: str
    captured: int
