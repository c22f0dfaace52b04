"""``supervisor.classify``: one failure, classified through the taxonomy, as an SdkErrorEvent.

What an application that keeps its own retry loop needs from the decision core: an httpx response
(a status of 400 or more), an httpx or websockets exception, a :class:`~supervisor.taxonomy.RawError`
or its JSON object (docs/taxonomy.md, "The RawError envelope") in; the seed's event out, with its
class, its policy and its flags (``retryable``, ``trigger``, ``retryAfterMs``, ...).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import msgspec

from supervisor.boundary import SessionContext, raw_from_exception, raw_from_response
from supervisor.taxonomy.classifier import Classifier
from supervisor.taxonomy.envelope import RawError, envelope_from_object
from supervisor.taxonomy.loader import DEFAULT_VERSION, load_taxonomy
from supervisor.taxonomy.model import Channel, Platform, SdkErrorEvent

__all__ = ["classify"]


@functools.lru_cache(maxsize=16)
def _classifier(taxonomy: str) -> Classifier:
    return Classifier(load_taxonomy(taxonomy))


def classify(
    failure: httpx.Response | BaseException | RawError | Mapping[str, Any],
    *,
    platform: Platform | str | None = None,
    taxonomy: str | Path = DEFAULT_VERSION,
    channel: Channel | str = Channel.REST,
    context: Mapping[str, Any] | None = None,
) -> SdkErrorEvent:
    """The SdkErrorEvent of ``failure`` (the module docstring). ``platform`` is required unless
    ``failure`` is an envelope (which names its own); ``context`` adds the seed's ``conversationId``
    and ``agentId``. A file's taxonomy is read once per path (restart to read it again)."""
    if isinstance(failure, Mapping):
        raw = envelope_from_object(dict(failure))
    elif isinstance(failure, RawError):
        raw = failure
    else:
        if platform is None:
            raise ValueError("classify: platform= is required for a response or an exception")
        ctx = SessionContext("library", Platform(platform), Channel(channel))
        if isinstance(failure, httpx.Response):
            raw = raw_from_response(failure, ctx=ctx)
        else:
            raw = raw_from_exception(failure, ctx=ctx)
        own = {k: v for k, v in (raw.context or {}).items() if k != "sessionId"}
        raw = msgspec.structs.replace(raw, context=own)
    if context:
        raw = msgspec.structs.replace(raw, context={**(raw.context or {}), **context})
    return _classifier(str(taxonomy)).classify(raw)
