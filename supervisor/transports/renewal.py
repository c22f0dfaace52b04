"""When a notifications channel is renewed before the platform drops it (docs/platforms.md, "Genesys
Cloud notifications"; docs/runtime.md, "Notifications rollover").

A channel ends at the earlier of two deadlines: its own ``expires`` (PY269 ``Channel.expires``;
Genesys documents 24 h) and the expiry of the token that created it (a channel "closes when the
auth token used for it has expired": GN3P ``channel.py``, the ``{"result":"404"}`` case). The
session renews it ``lead`` seconds before the earlier one: at most :data:`RENEW_LEAD_S`, and never
more than a quarter of the time left, so a short-lived token (Genesys' minimum is 300 s) still
gets three quarters of its life before the rollover, and a rollover never follows the previous one
within :data:`MIN_GAP_S` [I: the vendors name no lead; five minutes is the token cache's own early
refresh, so a token about to be replaced and its channel are renewed together].

Pure: monotonic seconds in, a due time out.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.events import RolloverReason

__all__ = ["MIN_GAP_S", "RENEW_LEAD_S", "RenewalDue", "renewal_due"]

RENEW_LEAD_S = 300.0
MIN_GAP_S = 1.0


@dataclass(frozen=True, slots=True)
class RenewalDue:
    """A planned rollover: when (monotonic) and why."""

    at: float
    reason: RolloverReason


def renewal_due(
    now: float,
    *,
    channel_expires_at: float | None,
    token_expires_at: float | None,
    lead_s: float = RENEW_LEAD_S,
) -> RenewalDue | None:
    """When a channel created ``now`` is to be renewed; None when neither deadline is known."""
    deadlines = [
        (at, reason)
        for at, reason in (
            (token_expires_at, RolloverReason.TOKEN_EXPIRING),
            (channel_expires_at, RolloverReason.CHANNEL_EXPIRING),
        )
        if at is not None
    ]
    if not deadlines:
        return None
    deadline, reason = min(deadlines, key=lambda d: d[0])  # a tie: the token (it rules the channel)
    lead = min(max(lead_s, 0.0), max(deadline - now, 0.0) / 4.0)
    return RenewalDue(max(deadline - lead, now + MIN_GAP_S), reason)
