"""An event carried by both channels of a rollover's overlap is delivered once (docs/platforms.md,
"Genesys Cloud notifications", the rollover).

While a session rolls over make-before-break, the old channel and the new one are both subscribed
to the same topics, so the platform may send one event on each. :class:`OverlapDedupe` remembers a
digest of each event a channel delivered and drops an event whose digest another channel of the
session (the current one or the one before it) already delivered. An event repeated on one channel
is not ours to judge and passes.

The digest covers the topic, ``metadata.CorrelationId`` and the ``eventBody`` (canonical JSON):
no vendor source says whether two channels stamp one event with the same CorrelationId [I], so two
copies count as one only when they carry the same topic, the same CorrelationId (or none) *and*
the same body, and two different events that share a CorrelationId are both delivered.

Pure: no I/O, bounded memory (``capacity`` digests per channel, two channels).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_CAPACITY", "OverlapDedupe", "event_digest"]

#: digests kept per channel: far more than one overlap carries (seconds of events of one session)
DEFAULT_CAPACITY = 1024


def event_digest(message: Mapping[str, Any]) -> bytes:
    """What makes two frames the same event: topic, CorrelationId and body, canonically encoded."""
    metadata = message.get("metadata")
    correlation = metadata.get("CorrelationId") if isinstance(metadata, Mapping) else None
    canonical = json.dumps(
        [message.get("topicName"), correlation, message.get("eventBody")],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.blake2b(canonical.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class OverlapDedupe:
    """Per session: which events each of its last two channels delivered."""

    __slots__ = ("_capacity", "_seen", "dropped")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        # channel id -> digests it delivered, oldest first; at most two channels, oldest first
        self._seen: OrderedDict[str, OrderedDict[bytes, None]] = OrderedDict()
        self.dropped = 0

    def admit(self, channel_id: str, message: Mapping[str, Any]) -> bool:
        """True when ``message`` (an event frame received on ``channel_id``) is to be delivered."""
        digest = event_digest(message)
        for other, digests in self._seen.items():
            if other != channel_id and digest in digests:
                self.dropped += 1
                return False
        mine = self._seen.get(channel_id)
        if mine is None:
            mine = self._seen[channel_id] = OrderedDict()
            while len(self._seen) > 2:
                # a third channel: the one two rollovers ago can no longer duplicate anything
                self._seen.popitem(last=False)
        mine[digest] = None
        if len(mine) > self._capacity:
            mine.popitem(last=False)
        return True

    def channels(self) -> tuple[str, ...]:
        """The channels remembered, oldest first (for tests and diagnostics)."""
        return tuple(self._seen)
