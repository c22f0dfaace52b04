"""Bulk attribute updates with verification and reconciliation (seed edge case 2, section 3).

``service.py`` is the intake, the sender and the verifier; ``scheduler.py`` decides when work is
due on the injected clock; ``platform.py`` speaks Genesys' attribute routes through the one retry
executor; ``verify.py`` judges a read-back; ``backpressure.py`` keeps the per-tenant episodes.
docs/attributes.md describes the behaviour; the store (supervisor/store/) keeps what must survive.
"""

from __future__ import annotations

from supervisor.attributes.model import Backpressured, Refused, Settings, SubmitAnswer
from supervisor.attributes.service import Accepted, AttributeService, Targets

__all__ = ["Accepted", "AttributeService", "Backpressured", "Refused", "Settings", "SubmitAnswer", "Targets"]
