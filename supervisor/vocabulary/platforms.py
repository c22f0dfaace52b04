"""The platforms the daemon supervises sessions on: a configured session's ``platform``, an
envelope's ``platform`` (docs/taxonomy.md), the first half of an endpoint id.

A *scope* names one credential's world (docs/configuration.md, "Tenants"): the default tenant's (the
``[platforms.*]`` tables) is its :class:`Platform` alone, as the daemon always keyed it, a named
tenant's (``[tenants.NAME]``) a :class:`TenantScope`."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["Platform", "Scope", "TenantScope", "parse_scope"]


class Platform(enum.StrEnum):
    GENESYS = "genesys"
    CXONE = "cxone"


@dataclass(frozen=True, slots=True, order=True)
class TenantScope:
    """A named tenant (``[tenants.NAME]``) of ``platform``."""

    name: str
    platform: Platform

    @property
    def value(self) -> str:
        """The scope as the wire names a credential (``CREDENTIAL_*`` events' ``platform``, the token
        metrics' ``credential``): ``NAME/<platform>``; a Platform's ``value`` is its name."""
        return f"{self.name}/{self.platform.value}"

    def __str__(self) -> str:
        return self.value


#: the default tenant's scope is its platform; a named tenant's a TenantScope
Scope: TypeAlias = Platform | TenantScope


def parse_scope(text: str) -> Scope | None:
    """A scope from its ``value`` (``genesys``, ``east/genesys``: the store's ``platform`` column);
    None when it names none."""
    tenant, _, platform = text.rpartition("/")
    try:
        kind = Platform(platform)
    except ValueError:
        return None
    return TenantScope(tenant, kind) if tenant else kind
