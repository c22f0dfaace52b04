"""Genesys' 20 notification channels per user and app, shared by every notifications session of one
OAuth client (docs/platforms.md, "Genesys Cloud notifications").

PY269 ``NotificationsApi.post_notifications_channels``: "There is a limit of 20 channels per
user/app combination. Creating a 21st channel will remove the channel with oldest last used date.
Channels without an active connection will be removed first." A channel whose socket we closed is
therefore harmless: it is the first one removed. What must never happen is a creation while the
client already holds 20 *connected* channels, which would remove a live one, another session's.

:class:`ChannelQuota` counts the connected (or being created) channels of one client. A session's
own channel takes a place when it opens; a make-before-break rollover asks for a second place for
the overlap, waits while other rollovers hold the spare places, and is refused at once when the
sessions alone fill the quota (20 sessions: nothing would ever free a place), in which case the
rollover closes the old channel first (break-before-make, a gap) [I: a policy of ours]. Channels
other applications open with the same client are not seen (docs/runtime.md, known limits).
"""

from __future__ import annotations

import anyio

__all__ = ["GENESYS_CHANNEL_LIMIT", "ChannelQuota", "Place", "fleet_share"]

#: PY269 post_notifications_channels: 20 channels per user/app combination
GENESYS_CHANNEL_LIMIT = 20


def fleet_share(limit: int, owned: int, shards: int) -> int:
    """A fleet member's share of a client's ``limit`` channels: in proportion to the ``owned`` of all
    ``shards`` it holds, rounded up, at least one (the members' shares together may exceed the limit
    by less than one channel per member: the platform then drops the oldest unused channel, never a
    connected one while each member stays within its share of a fleet whose shards are all held)."""
    return max(1, -(-limit * owned // shards))


class Place:
    """One connected channel's place in the quota; :meth:`release` is idempotent."""

    __slots__ = ("_overlap", "_quota", "granted")

    def __init__(self, quota: ChannelQuota | None, *, granted: bool, overlap: bool) -> None:
        self._quota = quota
        self._overlap = overlap
        # False: no place was free (the channel goes over the quota, or the caller breaks first)
        self.granted = granted

    def release(self) -> None:
        quota, self._quota = self._quota, None
        if quota is not None and self.granted:
            quota._release(self._overlap)

    def settle(self) -> None:
        """The overlap is over (the old channel closed): this place is now the session's own."""
        quota = self._quota
        if quota is not None and self.granted and self._overlap:
            self._overlap = False
            quota._overlaps -= 1
            quota._wake()


class ChannelQuota:
    """The connected channels of one OAuth client, at most ``limit`` at a time."""

    def __init__(self, limit: int = GENESYS_CHANNEL_LIMIT) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.held = 0
        self._overlaps = 0
        self._freed = anyio.Event()

    @property
    def overlaps(self) -> int:
        """Rollovers holding a second place right now."""
        return self._overlaps

    async def reserve(self, *, overlap: bool = False) -> Place:
        """A place for one more connected channel.

        Waits while rollovers fill the quota (they end within seconds). When channels that are not
        rollovers fill it, a session's own channel (``overlap=False``) is granted nothing and goes
        over (the configuration allows at most ``limit`` sessions, so only channels opened while
        their predecessors are not yet counted as closed do), and a rollover is refused: the caller
        closes the old channel first.
        """
        while self.held >= self.limit:
            if self._overlaps == 0:
                return Place(None, granted=False, overlap=overlap)
            freed = self._freed
            await freed.wait()
        self.held += 1
        if overlap:
            self._overlaps += 1
        return Place(self, granted=True, overlap=overlap)

    def _release(self, overlap: bool) -> None:
        self.held -= 1
        if overlap:
            self._overlaps -= 1
        self._wake()

    def _wake(self) -> None:
        freed, self._freed = self._freed, anyio.Event()
        freed.set()
