"""The pacers' learned limits, kept in the store across restarts (docs/runtime.md, "Admission").

A restart need not discover each endpoint's limit again (machines/pacing.py, :meth:`Pacer.seed`):
what the previous run learned (the rate the platform refused at its last cut, CUBIC's W_max) is
kept in the store's ``meta`` table, one row per endpoint (docs/store.md, "meta")::

    pacer.genesys:webmessaging = {"limit": 200.0, "at": 1796194800.5}

``limit`` in attempts per second, ``at`` the wall time (epoch seconds) the daemon last knew it.
Rows are written for connect endpoints (handshakes, CXone starts: the ones paced from the start)
whenever their pacer cuts on a refusal (so a ``kill -9`` keeps the last one) and, for every one with a
learned limit, when the daemon stops; they are read at start (a fleet member's again at each
acquisition of shards: its peers' are the fleet's too), and a
record younger than ``[admission] learnedLimitMaxAge`` seeds its endpoint's pacer. A row that is
not such a record is ignored with one warning naming its key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

from machines.pacing import LearnedLimit
from supervisor.store import Store
from supervisor.vocabulary import EndpointId

__all__ = ["KEY_PREFIX", "decode", "encode", "key_of", "load", "save"]

#: the ``meta`` keys of the learned limits: ``pacer.<endpoint id>``
KEY_PREFIX = "pacer."

Warn = Callable[[str], object]


class _Record(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    limit: float
    at: float


def key_of(endpoint: EndpointId) -> str:
    """The ``meta`` key of ``endpoint``'s learned limit."""
    return f"{KEY_PREFIX}{endpoint}"


def encode(learned: LearnedLimit) -> str:
    """The ``meta`` value of a learned limit: a small JSON object."""
    return msgspec.json.encode(_Record(learned.limit, learned.at)).decode()


def decode(key: str, value: str) -> tuple[EndpointId, LearnedLimit]:
    """The endpoint and learned limit of one ``meta`` row; ValueError saying what is wrong with it."""
    # a named tenant's endpoint is ``NAME/<platform>:<endpoint>`` (docs/configuration.md, "Tenants")
    endpoint = EndpointId.parse(key.removeprefix(KEY_PREFIX)) if key.startswith(KEY_PREFIX) else None
    if endpoint is None:
        raise ValueError("not pacer.<platform>:<endpoint>")
    try:
        record = msgspec.json.decode(value, type=_Record)
    except msgspec.DecodeError as exc:
        raise ValueError(f'not {{"limit": attempts/s, "at": epoch seconds}} ({exc})') from None
    return endpoint, LearnedLimit(record.limit, record.at)


async def load(store: Store, now: float, max_age_s: float, warn: Warn | None) -> dict[EndpointId, float]:
    """The learned limits kept in ``store`` that are at most ``max_age_s`` old at ``now`` (wall
    time); a row that is not a learned limit is skipped with one warning naming its key."""
    if max_age_s <= 0:
        return {}
    out: dict[EndpointId, float] = {}
    for key, value in sorted((await store.read_meta(KEY_PREFIX)).items()):
        try:
            endpoint, learned = decode(key, value)
        except ValueError as exc:
            if warn is not None:
                warn(
                    f"store: {store.path}: meta key {key!r}: {exc}: ignored (the endpoint discovers its limit)"
                )
            continue
        if learned.fresh(now, max_age_s):
            out[endpoint] = learned.limit
    return out


async def save(store: Store, limits: Mapping[EndpointId, float], now: float) -> None:
    """Keep ``limits`` (each endpoint's learned limit) in ``store``, known at ``now`` (wall time)."""
    if limits:
        await store.write_meta(
            {key_of(endpoint): encode(LearnedLimit(limit, now)) for endpoint, limit in limits.items()}
        )
