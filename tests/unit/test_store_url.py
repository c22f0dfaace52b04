"""``[store] url`` and ``passwordFile``: what the configuration takes for a PostgreSQL store, and the
connection string the store opens with (supervisor/config_urls.py, supervisor/store/pg.py; docs/store.md, "PostgreSQL")."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from supervisor.config import parse_config
from supervisor.errors import ConfigError, StoreError
from supervisor.store.pg import connection_string

PLATFORMS = "[platforms]\n"


def store_table(**keys: str) -> str:
    return PLATFORMS + "[store]\n" + "".join(f'{k} = "{v}"\n' for k, v in keys.items())


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://supervisor@db.example.com:5432/supervisor",  # TCP: verify-full added
        "postgresql://supervisor@db.example.com/supervisor?sslmode=verify-ca&sslrootcert=/etc/ca.pem",
        "postgresql:///supervisor?host=/var/run/postgresql",  # a Unix socket: no TLS needed
        "postgres://%2Fvar%2Frun%2Fpostgresql/supervisor?sslmode=disable",
        "postgresql:///supervisor",  # libpq's default socket
    ],
)
def test_accepted_urls(url: str) -> None:
    config = parse_config(store_table(url=url, passwordFile="pg-password"), "c.toml")
    assert (config.store.url, config.store.password_file, config.store.path) == (url, "pg-password", None)


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        (
            {"url": "postgresql://supervisor:hunter2@db.example.com/s"},
            "store: url: the URL holds a password: put it in passwordFile instead (a URL is shown in logs and status)",
        ),
        (
            {"url": "postgresql://db.example.com/s?password=hunter2"},
            "store: url: the URL holds a password: put it in passwordFile instead (a URL is shown in logs and status)",
        ),
        (
            {"url": "postgresql://db.example.com/s?sslmode=require"},
            "store: url: sslmode=require does not check the server's certificate; a host reached over TCP "
            "(db.example.com) needs sslmode=verify-full (the default) or verify-ca",
        ),
        (
            {"url": "postgresql:///s?host=/run/pg,db.example.com&sslmode=prefer"},
            "store: url: sslmode=prefer does not check the server's certificate; a host reached over TCP "
            "(db.example.com) needs sslmode=verify-full (the default) or verify-ca",
        ),
        ({"url": "mysql://db.example.com/s"}, "store: url: expected a postgresql:// URL, got scheme 'mysql'"),
        (
            {"url": "postgresql:///s", "path": "/var/lib/s.sqlite3"},
            "store: path and url name two stores: give one",
        ),
        ({"passwordFile": "pg-password"}, "store: passwordFile is for a PostgreSQL store: give url too"),
    ],
)
def test_refused_in_one_located_line_without_the_password(keys: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(store_table(**keys), "c.toml")
    assert str(caught.value) == f"c.toml: {problem}"
    assert "hunter2" not in str(caught.value)


def test_a_tcp_host_gets_verify_full_and_the_password_from_its_file() -> None:
    params = conninfo_to_dict(connection_string("postgresql://supervisor@db.example.com/s", "pw"))
    assert params["sslmode"] == "verify-full" and params["password"] == "pw"
    assert params["host"] == "db.example.com" and params["application_name"] == "session-supervisor"
    kept = conninfo_to_dict(connection_string("postgresql://db.example.com/s?sslmode=verify-ca"))
    assert kept["sslmode"] == "verify-ca" and "password" not in kept
    local = conninfo_to_dict(connection_string("postgresql:///s?host=/var/run/postgresql"))
    assert "sslmode" not in local  # a Unix socket: libpq's own default


def test_the_store_refuses_a_url_the_configuration_would_refuse() -> None:
    with pytest.raises(StoreError) as caught:
        connection_string("postgresql://u:hunter2@db.example.com/s")
    assert "passwordFile" in str(caught.value) and "hunter2" not in str(caught.value)
    assert caught.value.path == "postgresql://u:***@db.example.com/s"


def test_run_check_says_a_postgresql_store_hands_sessions_over() -> None:
    from supervisor.cli.run_cmd import stop_line

    url = "postgresql:///contact?host=/var/run/postgresql"
    line = stop_line(parse_config(store_table(url=url), "c.toml"), {})
    assert line.startswith(f"stop: hands every session over to the next start (store: {url})")
