"""Tenants: what the daemon keeps one of per Genesys org or CXone business unit (docs/configuration.md, "Tenants").

A *scope* names one credential's world: its table, its token cache, its HTTP pools and request pipelines,
its endpoints (circuits, pacers, retry budgets). The default tenant (the ``[platforms.*]`` tables) is
scoped by its :class:`~supervisor.vocabulary.Platform` alone, as the daemon always was, so everything it
keyed and named stays as it was; a named tenant (``[tenants.NAME]``) by a
:class:`~supervisor.vocabulary.TenantScope`, its name and platform. Here: a scope found in a
configuration. No I/O.
"""

from __future__ import annotations

from supervisor.config import Config, CxoneConfig, GenesysConfig, SessionSpec, platform_of, table_key
from supervisor.vocabulary import Platform, Scope, TenantScope

__all__ = [
    "Scope",
    "TenantScope",
    "configured_scopes",
    "credential_keys",
    "scope_of",
    "scope_platform",
    "scope_table",
    "scope_tenant",
    "spec_scope",
]


def scope_of(tenant: str | None, platform: Platform) -> Scope:
    return platform if tenant is None else TenantScope(tenant, platform)


def spec_scope(spec: SessionSpec) -> Scope:
    """The scope a configured session runs in."""
    return scope_of(spec.tenant, spec.platform)


def scope_platform(scope: Scope) -> Platform:
    return scope.platform if isinstance(scope, TenantScope) else scope


def scope_tenant(scope: Scope) -> str | None:
    """The tenant's name (None: the default tenant)."""
    return scope.name if isinstance(scope, TenantScope) else None


def configured_scopes(config: Config) -> dict[Scope, GenesysConfig | CxoneConfig]:
    """Every scope ``config`` configures, with its table: the default tenant's platforms first."""
    out: dict[Scope, GenesysConfig | CxoneConfig] = {}
    for platform in Platform:
        table = getattr(config.platforms, platform.value)
        if table is not None:
            out[platform] = table
    for name in sorted(config.tenants):
        table = config.tenants[name]
        out[TenantScope(name, platform_of(table))] = table
    return out


def scope_table(config: Config, scope: Scope) -> GenesysConfig | CxoneConfig | None:
    """``scope``'s table in ``config`` (None: not configured, or a tenant now of another platform)."""
    return configured_scopes(config).get(scope)


def credential_keys(scope: Scope) -> tuple[str, ...]:
    """The keys of ``scope``'s credential files, as errors name them."""
    at = table_key(scope_tenant(scope), scope_platform(scope))
    if scope_platform(scope) is Platform.GENESYS:
        return (f"{at}.clientSecretFile",)
    return (f"{at}.clientSecretFile", f"{at}.passwordFile")
