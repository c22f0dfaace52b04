"""Endpoint ids: what is admitted, paced and broken as one (an endpoint's circuit, its pace, its
retry budget; machines/endpoint.py).

An endpoint is named by its platform and a name of ours (``genesys:streaming``: every notifications
handshake; ``cxone:api``: the agent API's REST calls). The id is a value, not a string to glue and
split: the platform is a :class:`~supervisor.vocabulary.platforms.Platform`, read as an attribute.
Its ``str()`` is the form the wire has always carried (``PACING_CHANGED``'s ``endpoint``, the socket
API's ``circuit.endpoint``, telemetry's ``pacing.endpoint``), and its circuit is ``circuit:<id>``.

A named tenant's endpoint (``[tenants.NAME]``, docs/configuration.md "Tenants") is its own: its own
circuit, pace and retry budget, so one tenant's outage or 429 never holds another's. Its ``str()`` is
``NAME/<platform>:<name>``; the default tenant's (the ``[platforms.*]`` tables, ``tenant`` empty) stays
``<platform>:<name>``, as it always was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from supervisor.vocabulary.platforms import Platform

__all__ = [
    "CXONE_AGENT_SESSIONS",
    "GENESYS_STREAMING",
    "GENESYS_WEBMESSAGING",
    "EndpointId",
]


@dataclass(frozen=True, slots=True, order=True)
class EndpointId:
    """One endpoint: ``platform``, ``name`` and its ``tenant`` (empty: the default tenant);
    ``str()`` is ``"<platform>:<name>"``, a named tenant's ``"<tenant>/<platform>:<name>"``.

    Ordered by platform, then name, then tenant (the default tenant's first).
    """

    platform: Platform
    name: str
    tenant: str = ""

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name:
            raise ValueError(f"an endpoint name is a non-empty word without ':', got {self.name!r}")
        if "/" in self.tenant or ":" in self.tenant:
            raise ValueError(f"a tenant name has no '/' or ':', got {self.tenant!r}")

    def __str__(self) -> str:
        if self.tenant:
            return f"{self.tenant}/{self.platform.value}:{self.name}"
        return f"{self.platform.value}:{self.name}"

    def of(self, tenant: str | None) -> EndpointId:
        """This endpoint of ``tenant`` (None or empty: as it is). An id already a tenant's stays
        that tenant's: a call is never moved to another tenant's circuit."""
        if not tenant or self.tenant:
            return self
        return EndpointId(self.platform, self.name, tenant)

    @property
    def circuit_id(self) -> str:
        """The id of the endpoint's circuit breaker (``CIRCUIT_*`` events' ``circuitId``)."""
        return f"circuit:{self}"

    @classmethod
    def parse(cls, text: str) -> EndpointId | None:
        """The endpoint whose ``str()`` is ``text`` (``genesys:api``, ``east/genesys:api``); None when
        ``text`` names none."""
        head, sep, name = text.partition(":")
        tenant, _, platform = head.rpartition("/")
        if not sep or platform not in {p.value for p in Platform}:
            return None
        try:
            return cls(Platform(platform), name, tenant)
        except ValueError:
            return None

    @classmethod
    def api(cls, platform: Platform) -> EndpointId:
        """A platform's REST API (``genesys:api``, ``cxone:api``): every call made on its host."""
        return cls(platform, "api")

    @classmethod
    def oauth(cls, platform: Platform) -> EndpointId:
        """A platform credential's token endpoint (``genesys:oauth``, ``cxone:oauth``)."""
        return cls(platform, "oauth")


#: the Genesys Web Messaging guest handshakes (a session's connection attempts)
GENESYS_WEBMESSAGING: Final = EndpointId(Platform.GENESYS, "webmessaging")
#: the Genesys notifications channels' handshakes
GENESYS_STREAMING: Final = EndpointId(Platform.GENESYS, "streaming")
#: CXone agent session starts (``POST agent-sessions``: a session's connection attempts)
CXONE_AGENT_SESSIONS: Final = EndpointId(Platform.CXONE, "agent-sessions")
