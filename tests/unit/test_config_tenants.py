"""``[tenants.NAME]`` tables and ``sessions[].tenant``: validated as ``[platforms.*]`` is, every error one
line naming its table; the default tenant's endpoints stay as they were, a named tenant's are its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import CxoneConfig, GenesysConfig, parse_config, parse_session, session_table
from supervisor.errors import ConfigError
from supervisor.runtime.circuits import configured_endpoints
from supervisor.runtime.tenancy import configured_scopes, credential_keys
from supervisor.telemetry.daemon import configured_secrets
from supervisor.vocabulary import EndpointId, Platform, TenantScope, parse_scope

GENESYS = """
[platforms.genesys]
loginUrl = "http://127.0.0.1:1"
apiUrl = "http://127.0.0.1:1"
webmessagingUrl = "ws://127.0.0.1:1"
clientId = "default-client"
clientSecretFile = "s"
deploymentId = "dep"
"""

EAST = """
[tenants.east]
platform = "genesys"
loginUrl = "http://127.0.0.1:2"
apiUrl = "http://127.0.0.1:2"
webmessagingUrl = "ws://127.0.0.1:2"
clientId = "east-client"
clientSecretFile = "east-secret"
deploymentId = "dep-east"
"""

BU = """
[tenants.bu-7]
platform = "cxone"
authUrl = "http://127.0.0.1:3"
clientId = "app"
clientSecretFile = "s"
username = "AKID"
passwordFile = "p"
"""


def session(kind: str, tenant: str | None = None, platform: str = "genesys") -> str:
    named = "" if tenant is None else f'tenant = "{tenant}"\n'
    return f'[[sessions]]\nid = "s-{kind}-{tenant}"\nplatform = "{platform}"\nkind = "{kind}"\nagentId = "a"\n{named}'


def test_a_tenant_table_is_read_with_the_platforms_model_and_its_sessions_run_on_it() -> None:
    config = parse_config(GENESYS + EAST + BU + session("webmessaging", "east"), "c.toml")
    east, bu = config.tenants["east"], config.tenants["bu-7"]
    assert (
        isinstance(east, GenesysConfig)
        and east.client_id == "east-client"
        and east.keepalive.ping_interval == 15
    )
    assert isinstance(bu, CxoneConfig) and bu.poll_timeout == 30
    assert session_table(config, config.sessions[0]) is east
    assert list(configured_scopes(config)) == [
        Platform.GENESYS,
        TenantScope("bu-7", Platform.CXONE),
        TenantScope("east", Platform.GENESYS),
    ]
    assert credential_keys(TenantScope("bu-7", Platform.CXONE)) == (
        "tenants.bu-7.clientSecretFile",
        "tenants.bu-7.passwordFile",
    )


def test_the_default_tenants_endpoints_keep_their_names_and_a_named_tenants_are_its_own() -> None:
    config = parse_config(
        GENESYS + EAST + session("webmessaging") + session("webmessaging", "east"), "c.toml"
    )
    assert [str(e) for e in configured_endpoints(config)] == [
        "genesys:api",
        "east/genesys:api",
        "genesys:oauth",
        "east/genesys:oauth",
        "genesys:webmessaging",
        "east/genesys:webmessaging",
    ]
    api = EndpointId.api(Platform.GENESYS)
    assert api.of(None) is api and api.of("east").circuit_id == "circuit:east/genesys:api"
    assert api.of("east").of("west") == api.of("east")  # never moved to another tenant's circuit


def test_a_configuration_of_tenants_alone_needs_no_platforms_table() -> None:
    config = parse_config(EAST + session("webmessaging", "east"), "c.toml")
    assert config.platforms.genesys is None and config.sessions[0].tenant == "east"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            EAST.replace("[tenants.east]", '[tenants."east/1"]'),
            r"^c\.toml: tenants\.east/1: invalid tenant name: 1 to 64 letters, digits, '-' or '_', starting with a letter or digit$",
        ),
        (
            EAST.replace('platform = "genesys"', 'platform = "genesis"'),
            r"^c\.toml: tenants\.east\.platform: expected 'genesys' or 'cxone', got 'genesis'$",
        ),
        (
            EAST.replace('platform = "genesys"\n', ""),
            r"^c\.toml: tenants\.east\.platform: expected 'genesys' or 'cxone', required$",
        ),
        (
            EAST.replace(
                'loginUrl = "http://127.0.0.1:2"', 'loginUrl = "http://127.0.0.1:2"\nloginurl = "x"'
            ),
            r"^c\.toml: tenants\.east: object contains unknown field `loginurl`$",
        ),
        (
            EAST.replace('platform = "genesys"', 'platform = "cxone"'),
            r"^c\.toml: tenants\.east: object contains unknown field `loginUrl`$",
        ),
        (
            EAST.replace('loginUrl = "http://127.0.0.1:2"', 'loginUrl = "ftp://127.0.0.1:2"'),
            r"^c\.toml: tenants\.east\.loginUrl: ",
        ),
        (
            BU.replace('username = "AKID"\n', ""),
            r"^c\.toml: tenants\.bu-7\.username: required: the access key id",
        ),
        (
            GENESYS + session("webmessaging", "west"),
            r"^c\.toml: sessions\[0\]\.tenant: no tenant 'west' \(\[tenants\.west\]\)$",
        ),
        (
            GENESYS + BU + session("webmessaging", "bu-7"),
            r"^c\.toml: sessions\[0\]\.tenant: tenant 'bu-7' is a cxone tenant, not genesys$",
        ),
        (
            EAST.replace('clientId = "east-client"\n', "") + session("notifications", "east"),
            r"^c\.toml: tenants\.east\.clientId: required by sessions\[0\]$",
        ),
        (
            GENESYS + session("webmessaging", "no good"),
            r"^c\.toml: sessions\[0\]\.tenant: expected `str` matching regex",
        ),
    ],
)
def test_a_bad_tenant_table_or_reference_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text, "c.toml")


def test_genesys_channel_limit_is_counted_per_tenant_client() -> None:
    """Twenty notifications sessions on each of two OAuth clients fit; a 21st on one does not (one channel per
    session: with shared channels, the default, the limit is twenty channels of topics)."""
    per_session = "sharedChannels = false\n"
    genesys = GENESYS.replace("[platforms.genesys]\n", "[platforms.genesys]\n" + per_session)
    east = EAST.replace('platform = "genesys"\n', 'platform = "genesys"\n' + per_session)
    entries = "".join(
        f'[[sessions]]\nid = "{t}-{i}"\nplatform = "genesys"\nkind = "notifications"\nagentId = "a{i}"\n'
        + (f'tenant = "{t}"\n' if t != "default" else "")
        for t in ("default", "east")
        for i in range(20)
    )
    config = parse_config(genesys + east + entries, "c.toml")
    extra = {"id": "east-20", "kind": "notifications", "agentId": "b", "tenant": "east"}
    with pytest.raises(ConfigError, match=r"tenants\.east\.clientId is shared"):
        parse_session(extra, config, "api", "sessions[0]", notifications={None: 20, "east": 20})
    spec = parse_session(extra, config, "api", "sessions[0]", notifications={None: 20, "east": 19})
    assert spec.tenant == "east" and spec.platform is Platform.GENESYS


def test_every_tenants_credentials_are_given_to_the_scrubber(tmp_path: Path) -> None:
    """A named tenant's client secret and access key secret never reach telemetry: the scrubber is
    given them as it is the default tenant's."""
    for name, value in {
        "s": "default-secret-1",
        "east-secret": "east-secret-2",
        "bu-s": "bu-secret-3",
        "bu-p": "bu-password-4",
    }.items():
        (tmp_path / name).write_text(value)
    bu = BU.replace('clientSecretFile = "s"', 'clientSecretFile = "bu-s"').replace('"p"', '"bu-p"')
    config = parse_config(GENESYS + EAST + bu, "c.toml")
    secrets = configured_secrets(config, environ={}, config_dir=tmp_path)
    assert sorted(secrets) == ["bu-password-4", "bu-secret-3", "default-secret-1", "east-secret-2"]


def test_a_stored_platform_names_its_tenant_and_the_default_tenants_stays_as_it_was() -> None:
    """The store's ``platform`` column: ``genesys`` for the default tenant (as every existing store has
    it), ``east/genesys`` for a named one; read back to the scope whose credential ends it."""
    assert parse_scope("genesys") is Platform.GENESYS
    assert parse_scope("east/genesys") == TenantScope("east", Platform.GENESYS)
    assert parse_scope(TenantScope("bu-7", Platform.CXONE).value) == TenantScope("bu-7", Platform.CXONE)
    assert parse_scope("genesis") is None and parse_scope("east/") is None
