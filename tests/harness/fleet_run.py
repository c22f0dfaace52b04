"""A fleet run on one machine for the tests: PostgreSQL, both simulators, N members as real processes.

::

    async with running_fleet(FleetSpec(members=3), genesys_sim, cxone_sim) as fleet:
        await fleet.wait_all_active()
        victim = fleet.holder_of_most()
        moved = await fleet.kill9(victim)           # kill -9; the sessions its shards held
        await fleet.wait_taken_over(moved, after)   # every one acting again under a newer acquisition
        await fleet.restart(victim)
        evidence = await fleet.evidence()           # what the checks of tests/harness/fleet_invariants.py read

* **The database** (:class:`FleetDatabase`): a server of the fleet's own (:func:`tests.harness.postgres.start_embedded`,
  so stopping it for a restart touches no other test), one schema for the members' store, and a test-only
  audit: a trigger recording every insert and update of the fenced tables (``server_sessions``, ``outbox``)
  with its ``epoch`` and the database's clock into a table of another schema (the store's own schema
  holds only the store's tables). Reads open a fresh connection each time: they go on working across
  the database's restart.
* **The members** (:class:`Member`): ``python -m supervisor run`` children from generated configurations
  (:func:`member_config`: every session of the fleet in each, ``[store] url`` on the database's
  socket, ``[fleet]`` with the member id, ``leaseSeconds``, ``renewSeconds``, per-member sockets, the
  stamp ``[daemon] stampMember``), so ``kill -9``, SIGSTOP and SIGTERM are the kernel's.
* **What they did**: the simulators' activity logs followed from their cursors (read every
  :data:`READ_EVERY_S`, so the ring never wraps under a reader), the guest tokens the store holds
  (which name a Web Messaging session in the log: ``wm:`` + a digest of the token), the lease audit
  ``lease_acquisitions``; the faults the harness made, with their times on the same clock.
* **The simulators' own loop** (``Fleet.loop_stalls``, the simulators' own watch,
  supervisor/sim/loop_stalls.py, keeping every stall): they run in this process, and an entry is
  stamped when their loop handles it; a stall of that loop (this process's, never a member's) records
  what arrived meanwhile in a clump after it. The stalls are kept with the evidence, so a report says
  whether the judge itself was late.

Waits poll the activity and ``shard_leases``; the only sleeps are a fault's own hold (the scenario).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import psycopg
from anyio.abc import Process
from psycopg import sql

from supervisor.api.client import Client
from supervisor.api.protocol import Method
from supervisor.errors import ApiError, ApiUnavailable
from supervisor.sim.activity import ActivityLog, token_key
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.sim.loop_stalls import LoopStalls
from supervisor.store.pg import PgStore
from supervisor.store.shards import shard_of
from tests.harness.config import Credentials, config_file, cxone_table, genesys_config, with_daemon
from tests.harness.fleet_invariants import (
    Acquisition,
    Act,
    Failure,
    LeaseTimeline,
    Pause,
    RowWrite,
    acts,
    takeover_latencies,
)
from tests.harness.postgres import PostgresServer, server_from_environment, url_of
from tests.harness.process import spawn

__all__ = [
    "FENCE_MARGIN_S",
    "READ_EVERY_S",
    "Evidence",
    "Fault",
    "Fleet",
    "FleetDatabase",
    "FleetSpec",
    "Member",
    "member_config",
    "running_fleet",
]

#: how often the activity logs are read: well within the ring (a fleet writes a few hundred entries a second)
READ_EVERY_S: Final = 0.5
#: a member's fence: its last renewal's send + TTL - 4 s (6 s with the defaults): nothing after it
FENCE_MARGIN_S: Final = 6.0
_FENCED_TABLES: Final = ("server_sessions", "outbox")
_POLL_S: Final = 0.2


@dataclass(frozen=True)
class FleetSpec:
    """What a fleet runs: its members, its sessions, its lease timing and admission rate."""

    members: int = 3
    web_messaging: int = 300
    cxone: int = 300
    notifications: int = 60
    lease_seconds: float = 10.0
    renew_seconds: float = 2.0
    #: connection attempts per second the fleet may make together (the simulators refuse the excess)
    admission_rate: float = 100.0
    #: each member's own loopback address (``[fleet] localAddress``), or None: all on 127.0.0.1
    addresses: Sequence[str] | None = None
    #: write the ``[fleet]`` table (members of a PostgreSQL store); False: the daemon's plain store
    fleet_table: bool = True

    def names(self) -> list[str]:
        return [f"m{i + 1}" for i in range(self.members)]

    def session_ids(self) -> list[str]:
        """The sessions whose acts the activity names: Web Messaging guests and CXone agent sessions
        (a notifications session shares its member's channel: the log names the channel, not it)."""
        return [f"wm-{i}" for i in range(self.web_messaging)] + [f"cx-{i}" for i in range(self.cxone)]


def member_config(
    spec: FleetSpec,
    name: str,
    directory: Path,
    *,
    genesys: Mapping[str, str],
    cxone: Mapping[str, str],
    store_url: str,
    address: str | None = None,
) -> Path:
    """The configuration of member ``name`` in ``directory`` (its sockets there): every session of
    the fleet (each member runs those of the shards it holds), the store, the ``[fleet]`` table."""
    sockets = directory / "sockets"
    sockets.mkdir(parents=True, exist_ok=True)
    text = f'[sockets]\nsubscribe = "{sockets / "subscribe.sock"}"\ncontrol = "{sockets / "control.sock"}"\n'
    text += f'[store]\nurl = "{store_url}"\n'
    if spec.fleet_table:
        text += (
            f'[fleet]\nmember = "{name}"\nleaseSeconds = {spec.lease_seconds}\n'
            f"renewSeconds = {spec.renew_seconds}\n"
        )
        if address is not None:
            text += f'localAddress = "{address}"\n'
    genesys_text = genesys_config(genesys, spec.web_messaging, notifications=spec.notifications)
    # the admission pace starts at the fleet's rate: the configured rates are the fleet's, and each
    # member paces at its share of them (the shards it owns out of 256: supervisor/fleet/admission.py),
    # so the members' paces add up to it whoever holds what (divided here too, a member owning a
    # third paced at a ninth of the fleet's rate)
    genesys_text = genesys_text.replace(
        "[admission]\n", f"[admission]\ninitialRate = {spec.admission_rate:g}\n", 1
    )
    text += with_daemon(genesys_text, stampMember=name)
    text += cxone_table(cxone, poll_timeout=5, watchdog=15.0)
    for i in range(spec.cxone):
        text += (
            f'[[sessions]]\nid = "cx-{i}"\nplatform = "cxone"\nkind = "agent-session"\n'
            f'stationId = "station-{i}"\nagentId = "{100001 + i}"\n'
        )
    return config_file(directory, text, Credentials())


def _audit_schema(schema: str) -> str:
    return f"{schema}_audit"


class FleetDatabase:
    """The fleet's PostgreSQL: its own server, the store's schema, and the test-only write audit."""

    def __init__(self, server: PostgresServer, schema: str) -> None:
        self.server = server
        self.schema = schema
        self.dsn = psycopg.conninfo.make_conninfo(server.dsn, options=f"-c search_path={schema}")
        #: ``[store] url``
        self.url = url_of(self.dsn)
        #: the audit's schema (beside the store's, which holds only the store's tables)
        self.audit = _audit_schema(schema)
        self.audited = False

    @classmethod
    def on(cls, server: PostgresServer, schema: str) -> FleetDatabase:
        """The fleet's schema (made anew, with the audit's) on ``server``."""
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for name in (schema, _audit_schema(schema)):
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        return cls(server, schema)

    @classmethod
    def start(cls, schema: str = "fleet") -> FleetDatabase:
        """A server of the fleet's own (``PG_DSN``'s when set: then :meth:`stop` cannot restart it)."""
        server = server_from_environment()
        try:
            return cls.on(server, schema)
        except BaseException:
            server.remove()
            raise

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One read on a fresh connection (it works again as soon as the server does)."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            return list(conn.execute(sql, params).fetchall())

    async def aquery(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await anyio.to_thread.run_sync(self.query, sql, params)

    def now(self) -> float:
        """The database's clock (the lease audit's)."""
        return float(self.query("SELECT extract(epoch from clock_timestamp())")[0][0])

    def has_fleet_tables(self) -> bool:
        """Whether the store's schema has the fleet's tables and the fenced rows' ``epoch`` (migration 6)."""
        rows = self.query(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = %s",
            (self.schema,),
        )
        tables = {t for t, _ in rows}
        epochs = {t for t, c in rows if c == "epoch"}
        return {"shard_leases", "lease_acquisitions"} <= tables and set(_FENCED_TABLES) <= epochs

    def install_write_audit(self) -> bool:
        """The trigger recording every write of a fenced row (its epoch, the database's clock); False
        when the schema has no ``epoch`` to record (nothing installed)."""
        if not self.has_fleet_tables():
            return False
        a = self.audit
        statements = [
            f"CREATE SCHEMA IF NOT EXISTS {a}",
            f"CREATE TABLE IF NOT EXISTS {a}.row_writes (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "tbl TEXT NOT NULL, session_id TEXT NOT NULL, epoch BIGINT, at DOUBLE PRECISION NOT NULL)",
            # clock_timestamp(): when the row was written, inside its transaction; a takeover's
            # acquisition waits on the fence's FOR SHARE lock, so it is stamped after a write it races
            f"CREATE OR REPLACE FUNCTION {a}.record_write() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN INSERT INTO {a}.row_writes (tbl, session_id, epoch, at) VALUES (TG_TABLE_NAME, "
            "NEW.session_id, NEW.epoch, extract(epoch from clock_timestamp())); RETURN NULL; END $$",
        ]
        for table in _FENCED_TABLES:
            statements.append(
                f"CREATE OR REPLACE TRIGGER fleet_record_write AFTER INSERT OR UPDATE ON {self.schema}.{table} "
                f"FOR EACH ROW EXECUTE FUNCTION {a}.record_write()"
            )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        self.audited = True
        return True

    def acquisitions(self) -> list[Acquisition]:
        return self.acquisitions_after(0)[0]

    def acquisitions_after(self, last_id: int) -> tuple[list[Acquisition], int]:
        """The audit rows after ``last_id``, and the last id read (the harness reads on from it: the
        whole audit, read five times a second, cost the simulators' loop seconds in the full form)."""
        rows = self.query(
            "SELECT id, shard, member, epoch, previous_owner, reason, at FROM lease_acquisitions "
            "WHERE id > %s ORDER BY id",
            (last_id,),
        )
        found = [Acquisition(int(s), str(m), int(e), p, str(r), float(t)) for _i, s, m, e, p, r, t in rows]
        return found, (int(rows[-1][0]) if rows else last_id)

    def leases(self) -> dict[int, tuple[str | None, int, float | None]]:
        """``shard_leases`` now: shard -> (owner, epoch, expires_at), and only the valid ones owned."""
        rows = self.query(
            "SELECT shard, CASE WHEN expires_at > extract(epoch from clock_timestamp()) THEN owner END, "
            "epoch, expires_at FROM shard_leases"
        )
        return {int(s): (o, int(e), x) for s, o, e, x in rows}

    def guest_tokens(self) -> list[tuple[str, str]]:
        """Every (session, guest token) the store holds now."""
        rows = self.query("SELECT session_id, guest_token FROM server_sessions WHERE guest_token IS NOT NULL")
        return [(str(s), str(t)) for s, t in rows]

    def row_writes(self) -> list[RowWrite]:
        if not self.audited:
            return []
        rows = self.query(f"SELECT tbl, session_id, epoch, at FROM {self.audit}.row_writes ORDER BY id")
        return [RowWrite(str(t), str(s), None if e is None else int(e), float(a)) for t, s, e, a in rows]

    def stop(self) -> None:
        """Stop the server at once (a crash, as clients see it)."""
        self.server.stop()

    def start_again(self) -> None:
        self.server.start()

    def remove(self) -> None:
        self.server.remove()


class ActivityFollower:
    """One simulator's activity log read from a cursor (the simulators run in this process)."""

    def __init__(self, log: ActivityLog) -> None:
        self.log = log
        self.cursor = 0
        self.entries: list[dict[str, Any]] = []
        self.lost = 0

    def read(self) -> int:
        page = self.log.since(self.cursor)
        self.entries.extend(page.entries)
        self.lost += page.lost
        self.cursor = page.next
        return len(page.entries)


@dataclass
class Member:
    """One member: its configuration, and the process running it (None before its first start). Its
    standard output and error go to ``output.log`` beside its configuration (the harness reads the
    simulators' activity, not the members' lines: a fleet's lines would cost the test's loop)."""

    name: str
    config: Path
    running: Process | None = None
    starts: int = 0

    @property
    def control(self) -> Path:
        return self.config.parent / "sockets" / "control.sock"

    @property
    def log(self) -> Path:
        return self.config.parent / "output.log"

    @property
    def process(self) -> Process:
        assert self.running is not None, f"{self.name} was never started"
        return self.running

    def alive(self) -> bool:
        return self.running is not None and self.running.returncode is None

    def tail(self, lines: int = 20) -> str:
        """The end of its output (for a failure's message)."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass(frozen=True)
class Fault:
    """A fault the harness made: what, to whom, when it began and ended (the simulators' clock)."""

    kind: str
    member: str | None
    at: float
    until: float


@dataclass
class Evidence:
    """Everything a run collected, for :mod:`tests.harness.fleet_invariants`."""

    entries: list[dict[str, Any]]
    lost: int
    session_of: dict[str, str]
    acquisitions: list[Acquisition]
    writes: list[RowWrite]
    faults: list[Fault]
    audited: bool
    #: the simulators' loop stalls: (wall time it ended, seconds late)
    stalls: list[tuple[float, float]] = field(default_factory=list)

    def acts(self) -> list[Act]:
        return acts(self.entries, self.session_of)

    def leases(self) -> LeaseTimeline:
        return LeaseTimeline(self.acquisitions)

    def pauses(self) -> list[Pause]:
        """The SIGSTOPs, each bounded by its pause time + the fence margin (its last renewal was sent
        no later than the pause: a bound no tighter than the member's own deadline)."""
        return [
            Pause(f.member, f.at, f.until, f.at + FENCE_MARGIN_S)
            for f in self.faults
            if f.kind == "sigstop" and f.member is not None
        ]


class Fleet:
    """A running fleet (module docstring); made by :func:`running_fleet`."""

    def __init__(
        self,
        spec: FleetSpec,
        db: FleetDatabase,
        genesys: GenesysSimulator,
        cxone: CxoneSimulator,
        directory: Path,
    ) -> None:
        self.spec = spec
        self.db = db
        self.genesys = genesys
        self.cxone = cxone
        self.directory = directory
        self.followers = [ActivityFollower(genesys.activity), ActivityFollower(cxone.activity)]
        self.session_of: dict[str, str] = {str(100001 + i): f"cx-{i}" for i in range(spec.cxone)}
        self.tokens: dict[str, str] = {}
        self.faults: list[Fault] = []
        #: the simulators' loop stalls, every one kept for the evidence
        self.loop_stalls = LoopStalls(keep=None)
        #: the lease audit as of the last refresh
        self.acquisitions: list[Acquisition] = []
        self._acquisitions_read = 0
        self._acts: list[Act] = []
        self._act_times: list[float] = []  # the acts' times, for bisecting (kept with them)
        self._pending: list[dict[str, Any]] = []
        self.members: dict[str, Member] = {}
        for i, name in enumerate(spec.names()):
            address = spec.addresses[i] if spec.addresses else None
            config = member_config(
                spec,
                name,
                directory / name,
                genesys=genesys.urls,
                cxone=cxone.urls,
                store_url=db.url,
                address=address,
            )
            self.members[name] = Member(name, config)

    # -- members ----------------------------------------------------------------------------------------

    async def start(self, name: str) -> None:
        member = self.members[name]
        with member.log.open("ab") as log:  # the child keeps its own descriptor
            member.running = await spawn(
                member.config,
                env={"PYTHONUNBUFFERED": "1"},  # every line in the log as written, up to a kill -9
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        member.starts += 1

    async def kill9(self, name: str) -> Failure:
        """``kill -9``: no handler, no drain; reaped before this returns."""
        process = self.members[name].process
        at = time.time()
        process.send_signal(signal.SIGKILL)
        await process.wait()
        self.faults.append(Fault("kill9", name, at, at))
        return Failure(name, at)

    async def pause(self, name: str, hold_s: float) -> Failure:
        """SIGSTOP for ``hold_s`` (the scenario's hold), then SIGCONT."""
        process = self.members[name].process
        at = time.time()
        process.send_signal(signal.SIGSTOP)
        try:
            await anyio.sleep(hold_s)  # the fault's own duration: the member stays stopped this long
        finally:
            process.send_signal(signal.SIGCONT)
            self.faults.append(Fault("sigstop", name, at, time.time()))
        return Failure(name, at)

    async def terminate(self, name: str, limit_s: float = 60.0) -> tuple[Failure, int]:
        """SIGTERM (the handover) and the exit code."""
        process = self.members[name].process
        at = time.time()
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(limit_s):
            code = await process.wait()
        self.faults.append(Fault("sigterm", name, at, time.time()))
        return Failure(name, at), code

    async def restart(self, name: str) -> None:
        member = self.members[name]
        if member.alive():
            raise AssertionError(f"{name} still runs")
        if member.running is not None:
            await member.running.aclose()
        await self.start(name)

    async def restart_database(self, hold_s: float) -> tuple[float, float]:
        """Stop PostgreSQL at once, hold it down ``hold_s`` (the scenario's), start it again."""
        if not self.db.server.embedded:
            raise AssertionError(
                "a database restart needs the embedded server (PG_DSN's cannot be restarted)"
            )
        at = time.time()
        await anyio.to_thread.run_sync(self.db.stop)
        await anyio.sleep(hold_s)  # the fault's own duration: the database stays down this long
        await anyio.to_thread.run_sync(self.db.start_again)
        until = time.time()
        self.faults.append(Fault("database_restart", None, at, until))
        return at, until

    def tails(self, lines: int = 15) -> str:
        """The end of every member's output (for a failure's message)."""

        def state(m: Member) -> str:
            if m.running is None:
                return "never started"
            code = m.running.returncode
            return "running" if code is None else f"exited {code}"

        return "\n".join(f"--- {name} ({state(m)}):\n{m.tail(lines)}" for name, m in self.members.items())

    def running(self) -> list[str]:
        return [n for n, m in self.members.items() if m.alive()]

    async def status(self, name: str) -> dict[str, Any] | None:
        """The member's ``Status`` over its control socket; None while it does not answer."""
        member = self.members[name]

        def call() -> dict[str, Any]:
            with Client(member.control, timeout=10.0) as client:
                return client.call(Method.STATUS)

        try:
            return await anyio.to_thread.run_sync(call)
        except (ApiUnavailable, ApiError):
            return None

    # -- what they did --------------------------------------------------------------------------------

    def _read_activity(self) -> None:
        """Read the logs on from their cursors; attribute the new entries (kept aside while their key
        is not known yet: a guest's token reaches the store after its first frames)."""
        for follower in self.followers:
            start = len(follower.entries)
            follower.read()
            fresh = follower.entries[start:]
            self._pending.extend(
                e for e in fresh if e.get("session") is not None and e.get("member") is not None
            )

    def _attribute(self) -> None:
        known = [e for e in self._pending if e["session"] in self.session_of]
        if known:
            self._pending = [e for e in self._pending if e["session"] not in self.session_of]
            self._acts.extend(acts(known, self.session_of))
            self._acts.sort(key=lambda a: (a.t, a.seq))
            self._act_times = [a.t for a in self._acts]

    async def refresh(self) -> None:
        """Read the activity since the last read, the guest tokens the store holds and the lease audit
        (what the store cannot answer while the database is down is read at the next refresh)."""
        self._read_activity()
        with contextlib.suppress(psycopg.OperationalError):
            for session, token in await anyio.to_thread.run_sync(self.db.guest_tokens):
                self.tokens[session] = token
                self.session_of[token_key(token)] = session
            found, self._acquisitions_read = await anyio.to_thread.run_sync(
                self.db.acquisitions_after, self._acquisitions_read
            )
            self.acquisitions.extend(found)
        self._attribute()

    async def follow(self) -> None:
        """Keep reading the activity (in the fleet's task group) so the ring never wraps under it."""
        while True:
            self._read_activity()
            # what was read is kept to the end: out of the collector's sight. Its full collections,
            # scanning every entry kept so far, grew to 0.2-0.8 s (74 stalls over 50 ms in one run, 10.5 s
            # in all, each a generation-2 collection): handshakes sent evenly were answered, and
            # stamped, in a clump after each, so a fleet pacing below the limit was seen above it
            # (109 within a second at 100/s; 79 once frozen) and its takeovers were seen late
            gc.freeze()
            await anyio.sleep(READ_EVERY_S)  # polling the simulators' logs, not waiting for a timer

    def entries(self) -> list[dict[str, Any]]:
        return [e for f in self.followers for e in f.entries]

    def keys(self) -> dict[str, str]:
        """Session -> the ``wm:`` key of its guest token now."""
        return {session: token_key(token) for session, token in self.tokens.items()}

    async def sessions_of(self, member: str) -> set[str]:
        """The fleet's sessions in the shards ``member`` holds now."""
        leases = await anyio.to_thread.run_sync(self.db.leases)
        shards = {s for s, (owner, _e, _x) in leases.items() if owner == member}
        return {s for s in self.spec.session_ids() if shard_of(s) in shards}

    async def holder_of_most(self) -> str:
        """The running member holding the most shards now."""
        leases = await anyio.to_thread.run_sync(self.db.leases)
        counts = dict.fromkeys(self.running(), 0)
        for owner, _e, _x in leases.values():
            if owner in counts:
                counts[owner] += 1
        return max(counts, key=lambda n: counts[n])

    async def wait(self, what: str, done: Callable[[], bool], limit_s: float) -> float:
        """Poll (:meth:`refresh` first) until ``done()``; the seconds it took."""
        began = time.monotonic()
        with anyio.move_on_after(limit_s):
            while True:
                await self.refresh()
                if done():
                    return time.monotonic() - began
                await anyio.sleep(_POLL_S)  # polling the logs and the store, not waiting for a timer
        raise AssertionError(f"{what}: not within {limit_s:.0f} s")

    def acted_since(self, sessions: Iterable[str], since: float, *, not_by: str | None = None) -> set[str]:
        """The ``sessions`` with an act after ``since`` (by a member other than ``not_by``), as of the
        last :meth:`refresh`."""
        wanted = set(sessions)
        first = bisect.bisect_right(self._act_times, since)
        return {a.session for a in self._acts[first:] if a.session in wanted and a.member != not_by}

    async def wait_all_active(self, limit_s: float) -> float:
        """Until every session (Web Messaging, CXone) has acted and every shard is held."""
        everyone = set(self.spec.session_ids())
        missing: set[str] = set()

        def done() -> bool:
            missing.clear()
            missing.update(everyone - self.acted_since(everyone, 0.0))
            return not missing

        try:
            took = await self.wait("every session active", done, limit_s)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {len(missing)} not yet, such as {sorted(missing)[:5]}") from None
        return took + await self.wait_shards_held(limit_s)

    async def wait_shards_held(self, limit_s: float) -> float:
        """Until every shard is held by a running member (``shard_leases``)."""
        began = time.monotonic()
        with anyio.move_on_after(limit_s):
            while True:
                with contextlib.suppress(psycopg.OperationalError):
                    leases = await anyio.to_thread.run_sync(self.db.leases)
                    running = set(self.running())
                    if all(owner in running for owner, _e, _x in leases.values()):
                        return time.monotonic() - began
                await anyio.sleep(_POLL_S)  # polling shard_leases, not waiting for a timer
        raise AssertionError(f"every shard held by a running member: not within {limit_s:.0f} s")

    async def wait_taken_over(self, failure: Failure, moved: Iterable[str], limit_s: float) -> float:
        """Until each of ``moved`` acts again under an acquisition made after the failure; failing,
        the sessions still waited for and what became of their shards."""
        sessions = set(moved)
        waiting: list[str] = []

        def done() -> bool:
            first = bisect.bisect_right(self._act_times, failure.at)
            # only an acquisition after the failure makes a takeover (takeover_latencies)
            since = LeaseTimeline(a for a in self.acquisitions if a.at > failure.at)
            found = takeover_latencies(self._acts[first:], failure, sessions, since)
            waiting[:] = sorted(s for s, v in found.items() if v is None)
            return not waiting

        try:
            return await self.wait(f"the sessions of {failure.member} taken over", done, limit_s)
        except AssertionError as exc:
            timeline = LeaseTimeline(self.acquisitions)
            said = []
            for session in waiting[:5]:
                shard = shard_of(session)
                after = [
                    f"{a.member}@{a.epoch} {a.reason} +{a.at - failure.at:.1f}s"
                    for a in timeline.of_shard(shard)
                    if a.at > failure.at - 1.0
                ]
                last = [a for a in self._acts if a.session == session][-1:]
                keys = {k for k, v in self.session_of.items() if v == session}
                unstamped = sum(
                    1
                    for e in self.entries()
                    if e.get("session") in keys and e.get("member") is None and e["t"] > failure.at
                )
                said.append(
                    f"{session} (shard {shard}): acquisitions {after or 'none'}; last act "
                    + (f"{last[0].member} {last[0].what} +{last[0].t - failure.at:.1f}s" if last else "none")
                    + f"; unstamped entries since the failure {unstamped}"
                )
            raise AssertionError(
                f"{exc}: {len(waiting)} of {len(sessions)} still waited for\n" + "\n".join(said)
            ) from None

    async def evidence(self) -> Evidence:
        await self.refresh()
        acquisitions = await anyio.to_thread.run_sync(self.db.acquisitions)
        writes = await anyio.to_thread.run_sync(self.db.row_writes)
        return Evidence(
            entries=self.entries(),
            lost=sum(f.lost for f in self.followers),
            session_of=dict(self.session_of),
            acquisitions=acquisitions,
            writes=writes,
            faults=list(self.faults),
            audited=self.db.audited,
            stalls=list(self.loop_stalls.recent),
        )


@contextlib.asynccontextmanager
async def running_fleet(
    spec: FleetSpec, genesys: GenesysSimulator, cxone: CxoneSimulator, directory: Path
) -> AsyncIterator[Fleet]:
    """A fleet of ``spec.members`` started on its own database, its schema migrated and audited first;
    every member killed and reaped, and the database removed, when the block ends, whatever happened."""
    db = await anyio.to_thread.run_sync(FleetDatabase.start)
    try:
        store = await PgStore.open(db.url)  # the schema, migrated before any member (then the audit)
        await store.aclose()
        await anyio.to_thread.run_sync(db.install_write_audit)
        async with anyio.create_task_group() as tg:
            fleet = Fleet(spec, db, genesys, cxone, directory)
            tg.start_soon(fleet.follow)
            tg.start_soon(fleet.loop_stalls.watch)
            try:
                for name in spec.names():
                    await fleet.start(name)
                yield fleet
            finally:
                with anyio.CancelScope(shield=True):
                    for member in fleet.members.values():
                        await _reap(member)
                tg.cancel_scope.cancel()
    finally:
        await anyio.to_thread.run_sync(db.remove)


async def _reap(member: Member) -> None:
    """Kill ``member``'s process if it runs (continued first, so a stopped one dies at once), wait for it."""
    if member.running is None:
        return
    process = member.running
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.kill()
    await process.wait()
    await process.aclose()
