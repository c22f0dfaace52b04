"""The daemon's durable state: desired sessions, the session ledger, and attribute updates (docs/attributes.md).

:class:`Durable` opens the store (``[store] path``, else ``$STATE_DIRECTORY/store.sqlite3``) and is
the supervisor's :class:`~supervisor.runtime.sessions.SessionBook`:

* **by shard** (docs/runtime.md, "Shards and leases"): nothing is read at open; :meth:`Durable.acquire`
  loads the desired sessions and the session ledger of the shards the supervisor's leases give it,
  :meth:`Durable.planned` ends the orphans of those shards only, :meth:`Durable.release` forgets a
  lost shard's rows without writing anything;
* **at start**, :meth:`Durable.plan` says which configured sessions run: a session ``ctl stop``
  stopped, or one a fail-fast (or an exhausted reconnection, a graceful close) ended, stays down
  until ``ctl start`` re-authenticates it (seed section 3); a Web Messaging session whose guest
  session was open resumes its guest token (``newSession: false``, the same conversation) instead
  of opening a new one. Server sessions left open by a crash whose session will not run are ended
  where the platform allows (supervisor/runtime/reconcile.py);
* **while running**, each session's server side is written before its first connection attempt
  (write-ahead: a crash after it leaves what a restart needs), confirmed when it goes active,
  closed when it ends (the guest token wiped);
* **a stop hands the sessions over** (``[handover] onStop``, default ``handover``): each session is
  left alive on the platform and its row keeps what the next start needs, with ``left_at``; the
  next start first ends every session left more than ``handover.maxAgeSeconds`` ago (the platform
  has, or soon will have, ended it for inactivity), then takes the others over (a guest resumes its
  token, a CXone agent session is polled on with its last id: no start, no join), before it
  reconciles orphans;
* **each endpoint's learned limit** (the rate its pacer was last refused at) is kept in the store's
  ``meta`` table at every cut and at the stop, and seeds that endpoint's pacer at the next start
  when it is recent (``[admission] learnedLimitMaxAge``; supervisor/runtime/learned_limits.py);
* it runs the :class:`~supervisor.attributes.AttributeService` and answers its questions about
  sessions (:class:`~supervisor.runtime.targets.SessionTargets`).

It is given the session table (supervisor/runtime/sessions.py) and the wiring at construction: it
reads which sessions run and what they are, and ends orphans through the platforms' clients. It
never holds the supervisor (which is given this book in turn).

A store that cannot be opened (corrupt, unreadable, a read-only or full state directory) does not
stop the daemon: ``STORE_DEGRADED`` names the file and the problem, and attribute updates are
refused (nothing is acknowledged that cannot be persisted). A store that can be read but not
written (a full disk, a read-only state directory) is read without writing, so the sessions start
as it says; any other leaves the sessions to run from the configuration alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus

from supervisor.attributes import AttributeService, Settings
from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.config import Config, SessionKind, SessionSpec, parse_session, read_secret
from supervisor.config_durable import StopAction, stop_action
from supervisor.errors import ConfigError, StoreError
from supervisor.events import PacingChanged, Published, SessionTransition, TerminationReason
from supervisor.runtime import learned_limits
from supervisor.runtime.left_rows import LeftRows
from supervisor.runtime.opened_rows import OpenedRows
from supervisor.runtime.reconcile import reconcile
from supervisor.runtime.session_runner import SessionRunner
from supervisor.runtime.sessions import Origin, Plan, SessionReader
from supervisor.runtime.targets import SessionTargets
from supervisor.runtime.wiring import Wiring
from supervisor.runtime.write_ahead import WriteAhead
from supervisor.store import DesiredSession, DesiredState, ServerSession, ServerState, SqliteStore, Store
from supervisor.store.events import StoreDegraded, StoreRecovered
from supervisor.store.model import FenceSource, LeftSession, OpenedSession
from supervisor.store.shards import shard_of
from supervisor.store.sqlite import Snapshot, read_only
from supervisor.store.testhooks import crash_points
from supervisor.taxonomy import Channel
from supervisor.vocabulary import CloseCode, EndpointId, Scope, SessionState

__all__ = ["STORE_FILE", "Durable", "Plan", "store_path"]

T = TypeVar("T")
STORE_FILE = "store.sqlite3"
#: PACING_CHANGED's reason when a pacer cut its rate on a refusal (machines/pacing.py, Pacer.throttled)
THROTTLED = "throttled"
NO_STORE = "no store: set [store] path, or run under systemd with StateDirectory= ($STATE_DIRECTORY)"
#: said of a store that could be read but not written at start (sessions follow it; nothing is written)
READ_ONLY = "read it without writing: the sessions start as it says"
Warn = Callable[[str], object]


def store_path(config: Config, environ: Mapping[str, str]) -> Path | None:
    """``[store] path``, else ``$STATE_DIRECTORY/store.sqlite3`` (its first directory), else None."""
    if config.store.path:
        return Path(config.store.path)
    state = environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state) / STORE_FILE if state else None


def _settings(config: Config) -> Settings:
    a = config.attributes
    return Settings(
        queue_depth=a.queue_depth,
        verify_after_s=a.verify_after,
        sensitive=frozenset(a.sensitive),
        resume_mark=a.resume_at,
        repair_budget=a.repair_budget,
    )


class Durable:
    """The supervisor's session book and the attribute service, over one store (module docstring)."""

    def __init__(
        self,
        config: Config,
        store: Store | None,
        *,
        sessions: SessionReader,
        wiring: Wiring,
        bus: EventBus,
        clock: Clock,
        problem: str | None = None,
        desired: dict[str, DesiredSession] | None = None,
        server: dict[str, ServerSession] | None = None,
        background: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        # a drain's handed-over rows, group-committed: the shards are freed only once they are written
        self._left_rows = None if store is None else LeftRows(store)
        # $SESSION_SUPERVISOR_ON_STOP overrides handover.onStop (checked here: a bad value ends the start)
        self.environ = dict(environ or {})
        stop_action(config.handover, self.environ)
        # False: the attribute service's work runs only when someone calls its run_due (tests do)
        self.background = background
        self.problem = problem
        self.bus = bus
        self.clock = clock
        # what a store read without writing held (None: read by shard from the store, on acquire)
        self._snapshot = None if store is not None else Snapshot(dict(desired or {}), dict(server or {}))
        #: the desired sessions and the session ledger of the shards this process owns (acquire)
        self.desired: dict[str, DesiredSession] = {}
        self.server: dict[str, ServerSession] = {}
        self.sessions = sessions
        self.wiring = wiring
        self.targets = SessionTargets(sessions, wiring, self._down_reason)
        self.attributes = AttributeService(
            store, self.targets, _settings(config), bus=bus, clock=clock, unavailable=problem
        )
        self._tg: TaskGroup | None = None
        #: a fleet member's leases, which fence the store's owner writes (None: one host)
        self.fences: FenceSource | None = None
        self._started: set[str] = set()
        #: server sessions found open at start that nobody wants: session id -> outcome once ended
        self.reconciled: dict[str, str] = {}
        # a fleet member's write-ahead of the sessions it starts, committed in groups (made at first use)
        self._grouped: WriteAhead | None = None
        # the rows of the sessions that went active, group-committed
        self._opened_rows: OpenedRows | None = None

    @classmethod
    async def open(
        cls,
        config: Config,
        *,
        sessions: SessionReader,
        wiring: Wiring,
        environ: Mapping[str, str],
        bus: EventBus,
        clock: Clock,
        warn: Warn | None = None,
        background: bool = True,
        fences: FenceSource | None = None,
    ) -> Durable:
        """Open the store named by ``config`` (never raises for the store: a degraded one is reported).

        ``fences``: a fleet member's leases (supervisor/fleet/leases.py), what a PostgreSQL store's
        owner writes are fenced by."""
        path = store_path(config, environ)
        common: dict[str, Any] = {
            "sessions": sessions,
            "wiring": wiring,
            "bus": bus,
            "clock": clock,
            "background": background,
            "environ": environ,
        }
        if config.store.url is not None:
            return await cls._open_postgres(config, wiring, environ, common, warn, fences)
        if path is None:
            return cls(config, None, problem=NO_STORE, **common)
        health = _Health(str(path), bus, clock, warn)
        try:
            store = await SqliteStore.open(
                path, synchronous=config.store.synchronous, environ=environ, on_health=health
            )
        except StoreError as exc:
            # a file that cannot be written (a full disk, a read-only state directory) is still
            # read: a session stopped or ended stays down, a guest session resumes
            snapshot = await _read_only(path)
            problem = exc.problem if snapshot is None else f"{exc.problem}; {READ_ONLY}"
            health(problem)
            return cls(
                config,
                None,
                problem=f"{exc.path}: {problem}",
                desired=None if snapshot is None else snapshot.desired,
                server=None if snapshot is None else snapshot.server,
                **common,
            )
        try:
            # each endpoint's pace starts from the limit the previous run learned, when it is recent
            # (the meta table: the host's, not a shard's)
            limits = await learned_limits.load(
                store, clock.time(), config.admission.learned_limit_max_age, warn
            )
        except StoreError as exc:
            await store.aclose()
            return cls(config, None, problem=str(exc), **common)
        wiring.stamper.epoch = store.epoch  # the test-only stamp carries the epoch this open took
        wiring.attempts.endpoints.seed(limits)
        # the sessions are read by shard, as the leases give them (acquire); a test's crash points sit
        # at the store's interface (supervisor/store/testhooks.py)
        return cls(config, crash_points(store, environ), **common)

    @property
    def epoch(self) -> int:
        """The owner epoch this open of the store took (``meta.epoch``); 0 without a store."""
        return 0 if self.store is None else self.store.epoch

    async def acquire(self, shards: Collection[int]) -> frozenset[int]:
        """``shards`` are now this process's: their desired sessions and server sessions loaded (read
        by shard), then the sessions of those shards a stop left too long ago ended, before any of
        them starts. Returns the shards whose sessions may start: all of them on one host; on a
        fleet member only those whose rows were read (:meth:`_read_shards`)."""
        wanted = frozenset(shards)
        store = self.store
        if store is None:
            snapshot = self._snapshot
            desired = {} if snapshot is None else _of(snapshot.desired, wanted)
            server = {} if snapshot is None else _of(snapshot.server, wanted)
        else:
            wanted, desired, server = await self._read_shards(store, wanted)
        self.desired.update(desired)
        self.server.update(server)
        if store is not None and self.fences is not None:
            await self._seed_peers_limits(store)
        await self._end_stale(server)
        if store is not None:
            # the attribute updates of those shards: queued writes, unanswered sends, verifications
            # (a store that fails here is degraded: its health hook reported it)
            with contextlib.suppress(StoreError):
                await self.attributes.load(wanted)
        return wanted

    async def _seed_peers_limits(self, store: Store) -> None:
        """A fleet member's pacers seeded, before an acquisition's sessions start, with the limits its
        peers learned since it opened the store (``meta`` is the fleet's: supervisor/fleet/admission.py):
        a member never refused itself otherwise slow-starts with no threshold, and two of them taking a
        SIGTERMed member's sessions at once passed the platform's limit together (121 handshakes within
        a second, at 100/s). A pacer with a limit of its own keeps it (``Pacer.seed``)."""
        max_age = self.sessions.config.admission.learned_limit_max_age
        with contextlib.suppress(StoreError):  # (the store's health hook reported it)
            limits = await learned_limits.load(store, self.clock.time(), max_age, None)
            self.wiring.attempts.endpoints.seed(limits)

    async def _read_shards(
        self, store: Store, wanted: frozenset[int]
    ) -> tuple[frozenset[int], dict[str, DesiredSession], dict[str, ServerSession]]:
        """The shards' rows, read in order to start their sessions.

        One host (no fences): a store that cannot be read leaves the sessions to the configuration
        (docs/store.md; its health hook reported it). A fleet member must not do that: a shard run
        without its rows starts its guests anew (a new conversation for a live customer), and so
        would the next owner. Giving the shard back would need the leases to free and skip it; the
        simpler correct choice is to retry the read while the shard is still held here: a dropped
        connection (a failover, a killed backend) is reopened by the next call, and a store down
        for longer outlasts the lease, whose deadline the fence stops at -- that shard is then not
        run here at all, and its next owner reads its rows."""
        delay = 0.0
        while True:
            try:
                desired = await store.desired_sessions(wanted)
                server = await store.server_sessions(wanted)
            except StoreError:
                fences = self.fences
                if fences is None:
                    return wanted, {}, {}
                wanted = frozenset(s for s in wanted if fences.fence_for(s) is not None)
                if not wanted:
                    return wanted, {}, {}
                # at once first (a connection that died is reopened), then backing off up to 1 s
                await anyio.sleep(delay)
                delay = min(1.0, delay * 2 or 0.1)
            else:
                return wanted, desired, server

    def release(self, shards: Collection[int]) -> None:
        """``shards`` are lost: what was loaded of them is forgotten (nothing written: the next owner
        reads the store as this process left it)."""
        lost = frozenset(shards)
        for table in (self.desired, self.server):
            for session_id in [k for k in table if shard_of(k) in lost]:
                del table[session_id]
        self._started -= {k for k in self._started if shard_of(k) in lost}
        self.attributes.release(lost)

    @classmethod
    async def _open_postgres(
        cls,
        config: Config,
        wiring: Wiring,
        environ: Mapping[str, str],
        common: dict[str, Any],
        warn: Warn | None,
        fences: FenceSource | None = None,
    ) -> Durable:
        """The store in PostgreSQL (``[store] url``): no read-only fallback, a database that cannot be
        reached is a degraded store (the sessions start as the configuration says; a fleet member's
        sessions start only as its leases give it their shards)."""
        url = config.store.url
        assert url is not None
        health = _Health(url, common["bus"], common["clock"], warn)
        try:
            from supervisor.store.pg import PgStore
        except ImportError:
            problem = "PostgreSQL support is not installed: pip install 'session-supervisor[postgres]'"
            health(problem)
            return cls(config, None, problem=f"{url}: {problem}", **common)
        try:
            secret = read_secret(
                config.store.password_file,
                key="store.passwordFile",
                config_dir=wiring.config_dir,
                environ=environ,
            )
            # the fleet member's leases fence the store's owner writes: each checks its shard's lease
            # in its own transaction (docs/store.md, "The fence")
            opened = await PgStore.open(
                url, password=None if secret is None else secret.reveal(), on_health=health, fences=fences
            )
        except ConfigError as exc:
            health(str(exc))
            return cls(config, None, problem=str(exc), **common)
        except StoreError as exc:
            health(exc.problem)
            return cls(config, None, problem=str(exc), **common)
        store: Store = opened  # mypy holds PgStore to the store's interface here
        try:
            desired = await store.desired_sessions()
            server = await store.server_sessions()
            # each endpoint's pace starts from the limit the previous run learned, as on SQLite
            limits = await learned_limits.load(
                store, common["clock"].time(), config.admission.learned_limit_max_age, warn
            )
        except StoreError as exc:
            await store.aclose()
            return cls(config, None, problem=str(exc), **common)
        wiring.stamper.epoch = opened.epoch  # the test-only stamp carries the epoch this open took
        wiring.attempts.endpoints.seed(limits)
        durable = cls(config, crash_points(store, environ), desired=desired, server=server, **common)
        durable.fences = fences
        return durable

    @property
    def degraded(self) -> str | None:
        """Why the daemon cannot persist now (the systemd glue's "degraded" reason), or None.

        No store configured at all (no ``[store] path``, no ``$STATE_DIRECTORY``) is a choice, not
        a degradation: None.
        """
        if self.store is None:
            return None if self.problem == NO_STORE else self.problem
        return None if self.store.degraded is None else f"{self.store.path}: {self.store.degraded}"

    def outbox_depth(self) -> int | None:
        """Attribute updates waiting to be sent or verified (the status line's ``outbox``), or None without a store."""
        return None if self.store is None else self.attributes.scheduler.pending()

    async def aclose(self) -> None:
        """Keep every endpoint's learned limit (the next start's pace begins from it), close the store."""
        if self.store is not None:
            await self._quietly(self.keep_limits())
            await self.store.aclose()

    async def keep_limits(self, endpoint: EndpointId | None = None) -> None:
        """Keep the limits the pacers learned (``endpoint``'s only, when given) in the store's ``meta``
        table, for the next start (supervisor/runtime/learned_limits.py)."""
        store = self.store
        if store is None:
            return
        limits = self.wiring.attempts.endpoints.learned()
        if endpoint is not None:
            limits = {endpoint: limits[endpoint]} if endpoint in limits else {}
        await learned_limits.save(store, limits, self.clock.time())

    # ------------------------------------------------------------------ the session book
    def plan(self, spec: SessionSpec) -> Plan:
        desired = self.desired.get(spec.id)
        if desired is not None and desired.state is not DesiredState.RUNNING:
            return Plan(False, reason=desired.reason or desired.state.value)
        self._started.add(spec.id)
        row = self.server.get(spec.id)
        if row is None or row.state is ServerState.CLOSED or row.kind != spec.kind.value:
            return Plan(True)
        if row.guest_token is not None and row.state is ServerState.OPEN:
            # a handover (or a crash) left the guest session open: resume it, same conversation
            return Plan(True, resume={"guestToken": row.guest_token})
        if row.left_at is not None and row.platform_session_id is not None and row.kind == "agent-session":
            # a handover left the agent session logged in: poll on with its last id, no new start
            return Plan(True, resume={"platformSessionId": row.platform_session_id})
        if row.kind == "agent-session" and row.state is ServerState.OPEN and row.left_at is None:
            # a crash (a kill -9, a fleet peer lost) left the agent session logged in with a rolling id
            # this store never saw: join it (one request) rather than start, be answered 409, then join
            return Plan(True, resume={"agentSession": "join"})
        return Plan(True)

    def stop_action(self) -> StopAction | None:
        """What a stop does to the sessions: ``[handover] onStop`` (``$SESSION_SUPERVISOR_ON_STOP``
        overrides it) with a store that can write; None without one (nothing would remember them: the
        drain closes them as it always did)."""
        if self.store is None:
            return None
        return stop_action(self.sessions.config.handover, self.environ)

    def hands_over(self) -> bool:
        return self.stop_action() is StopAction.HANDOVER

    def ends_at_stop(self) -> bool:
        return self.stop_action() is StopAction.END

    async def _end_stale(self, server: Mapping[str, ServerSession]) -> None:
        """Before any session starts: end every session a stop left longer ago than
        ``handover.maxAgeSeconds`` (published as SESSION_RECONCILED, closed in the ledger), so
        the start that follows opens a new one rather than taking over one the platform has
        ended, or is about to end, for inactivity."""
        store = self.store
        if store is None:
            return
        max_age = self.sessions.config.handover.max_age_seconds
        now = self.clock.time()
        stale = [
            row
            for row in server.values()
            if row.state is not ServerState.CLOSED and row.left_at is not None and now - row.left_at > max_age
        ]
        if not stale:
            return
        outcomes = await reconcile(store, stale, self.wiring, self.bus, self.clock)
        self.reconciled.update(outcomes)
        for row in stale:
            # not taken over: the session starts anew (a FAILED end stays open in the ledger for the
            # next start, but is not resumed now either)
            self.server[row.session_id] = dataclasses.replace(row, state=ServerState.CLOSED, guest_token=None)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the attribute service; started at once (each shard's attribute updates are loaded as it
        is acquired, its orphans ended once its sessions are handed over: :meth:`planned`)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            unsubscribe = self.bus.subscribe(self._on_event)
            try:
                if self.store is not None and self.background:
                    tg.start_soon(self.attributes.serve)
                task_status.started()
                await anyio.sleep_forever()
            finally:
                unsubscribe()
                self._tg = None

    def added_sessions(self, config: Config) -> list[SessionSpec]:
        """The sessions added over the control socket that the store kept (origin ``api``), in the
        order they were added, each validated on ``config`` as AddSession validated it.

        One the configuration can no longer run (its platform's table gone) is not started and stays
        in the store for a configuration that can; an id the file now declares is the file's."""
        declared = {spec.id for spec in config.sessions}
        notifications = Counter(
            spec.tenant for spec in config.sessions if spec.kind is SessionKind.NOTIFICATIONS
        )
        out: list[SessionSpec] = []
        for desired in self.desired.values():
            if desired.origin != Origin.API or desired.spec is None or desired.session_id in declared:
                continue
            try:
                raw = msgspec.json.decode(desired.spec)
                spec = parse_session(
                    raw, config, "store", f"sessions[{desired.session_id}]", notifications=notifications
                )
            except (msgspec.DecodeError, ConfigError):
                continue
            if spec.kind is SessionKind.NOTIFICATIONS:
                notifications[spec.tenant] += 1
            out.append(spec)
        return out

    async def keep_added(self, specs: Sequence[SessionSpec]) -> None:
        """Sessions added over the control socket, kept as desired sessions (origin ``api``, their
        spec as JSON) in one transaction before any starts; raises StoreError when they cannot be."""
        store = self.store
        if store is None:
            raise StoreError("store", self.problem or NO_STORE)
        now = self.clock.time()
        rows = [
            DesiredSession(
                spec.id,
                # the session's scope: its platform, a named tenant's NAME/<platform>
                spec.platform.value if spec.tenant is None else f"{spec.tenant}/{spec.platform.value}",
                DesiredState.RUNNING,
                None,
                now,
                origin=Origin.API.value,
                spec=msgspec.json.encode(spec).decode(),
            )
            for spec in specs
        ]
        await store.add_sessions(rows)
        for row in rows:
            self.desired[row.session_id] = row

    def planned(self, shards: Collection[int]) -> None:
        """Every session of ``shards`` that runs now has been handed over: what is left open on a
        server of those shards (of no other) is orphaned, and ended in the book's task group."""
        tg = self._tg
        if tg is not None and self.store is not None:
            tg.start_soon(self._reconcile, frozenset(shards))

    async def _reconcile(self, shards: frozenset[int]) -> None:
        store = self.store
        if store is None:
            return
        configured = {spec.id for spec in self.sessions.config.sessions} | set(self.sessions.added)
        for session_id, desired in list(self.desired.items()):
            # a session added over the control socket stays until RemoveSession, even when this
            # configuration cannot run it (its platform's table gone): a later one may
            if (
                shard_of(session_id) in shards
                and session_id not in configured
                and desired.origin != Origin.API
            ):
                self.desired.pop(session_id, None)
                await self._quietly(store.forget_desired(session_id))
        orphans = [
            row
            for row in self.server.values()
            if row.state is not ServerState.CLOSED
            and row.session_id not in self._started
            and shard_of(row.session_id) in shards
        ]
        if orphans:
            self.reconciled.update(await reconcile(store, orphans, self.wiring, self.bus, self.clock))

    async def opening(self, runner: SessionRunner, resumed: bool) -> None:
        """Before the first connection attempt: the session is desired, its server side about to open."""
        store = self.store
        if store is None:
            return
        ctx = runner.context
        self._started.add(runner.session_id)
        record = _record_of(runner)
        row = ServerSession(
            session_id=runner.session_id,
            # a named tenant's NAME/<platform> (supervisor/runtime/reconcile.py ends it with that tenant's credential)
            platform=ctx.scope.value,
            kind=ctx.channel.value,
            state=ServerState.OPEN if resumed else ServerState.OPENING,
            opened_at=self.clock.time(),
            agent_id=ctx.agent_id,
            conversation_id=ctx.conversation_id,
            platform_session_id=record.get("platformSessionId"),
            guest_token=record.get("guestToken"),
        )
        if self.fences is not None:
            # a fleet member: its sessions start by the shard-full, their rows are committed in groups
            desired = DesiredSession(
                runner.session_id, ctx.scope.value, DesiredState.RUNNING, None, self.clock.time()
            )
            self.desired[runner.session_id] = desired
            await self._write_ahead(store).write(desired, row)
            return
        await self._quietly(self._desire(runner.session_id, ctx.scope, DesiredState.RUNNING, None))
        await self._quietly(store.session_opening(row))

    def _write_ahead(self, store: Store) -> WriteAhead:
        write_ahead = self._grouped
        if write_ahead is None:
            write_ahead = self._grouped = WriteAhead(store)
        return write_ahead

    async def ended(self, runner: SessionRunner, *, draining: bool) -> None:
        """The runner is done: a termination stays across restarts; the server side is closed, except
        a session a drain handed over, which is left (``left_at``) for the next start to take over."""
        store = self.store
        if store is None:
            return
        if runner.core.handed_over:
            # alive on the platform: what the next start polls on (CXone's rolling id) and when it was
            # left; written with the other sessions the drain hands over at the same time
            assert self._left_rows is not None
            ctx = runner.context
            await self._left_rows.write(
                LeftSession(runner.session_id, self.clock.time(), ctx.platform_session_id)
            )
            return
        ended = runner.termination
        platform = runner.context.scope
        if ended is not None and ended.reason is not TerminationReason.STOPPED:
            reason = f"{ended.reason.value}/{ended.trigger.value if ended.trigger else ended.code}"
            await self._quietly(self._desire(runner.session_id, platform, DesiredState.TERMINATED, reason))
        stopped = ended is None or ended.reason is TerminationReason.STOPPED
        if (
            draining
            and stopped
            and runner.close_code is CloseCode.GOING_AWAY
            and runner.context.channel is Channel.WEBMESSAGING
        ):
            return  # closed with 1001 and no closeSession: the guest session lives on, the next start resumes it
        await self._quietly(store.session_closed(runner.session_id, "closed", self.clock.time()))

    async def desire(
        self, session_id: str, platform: Scope, running: bool, reason: str | None = None
    ) -> None:
        """``ctl start`` / ``ctl stop``: what should be alive after a restart."""
        state = DesiredState.RUNNING if running else DesiredState.STOPPED
        # a command, not the owner's own write: not fenced (docs/store.md, "The fence")
        await self._quietly(self._desire(session_id, platform, state, reason, fenced=False))

    def _down_reason(self, session_id: str) -> str | None:
        desired = self.desired.get(session_id)
        return None if desired is None else desired.reason

    def was_down(self, session_id: str) -> bool:
        """The store says the session was stopped or terminated (a start re-authenticates it)."""
        desired = self.desired.get(session_id)
        return desired is not None and desired.state is not DesiredState.RUNNING

    async def forget(self, session_id: str) -> None:
        """The session left the configuration."""
        self.desired.pop(session_id, None)
        if self.store is not None:
            await self._quietly(self.store.forget_desired(session_id))

    async def reread(self, session_id: str) -> DesiredSession | None:
        """The session's desired row read again (another fleet member wrote it: supervisor/fleet/follow.py)."""
        store = self.store
        if store is None:
            return self.desired.get(session_id)
        row = (await store.desired_sessions({shard_of(session_id)})).get(session_id)
        if row is None:
            self.desired.pop(session_id, None)
        else:
            self.desired[session_id] = row
        return row

    async def reread_shards(self, shards: Collection[int]) -> dict[str, DesiredSession]:
        """The desired rows of ``shards`` read again (kept as what the book knows)."""
        store = self.store
        wanted = frozenset(shards)
        if store is None:
            return _of(self.desired, wanted)
        rows = await store.desired_sessions(wanted)
        for session_id in [k for k in self.desired if shard_of(k) in wanted and k not in rows]:
            del self.desired[session_id]
        self.desired.update(rows)
        return rows

    def follow_attributes(self, session_id: str, tenant: str, conversation_id: str) -> None:
        """An update of ``session_id`` another fleet member accepted into the outbox: sent from here."""
        if self.store is not None:
            self.attributes.accepted_elsewhere(tenant, session_id, conversation_id)

    def draining(self) -> None:
        self.attributes.drain()

    async def _desire(
        self,
        session_id: str,
        platform: Scope,
        state: DesiredState,
        reason: str | None,
        *,
        fenced: bool = True,
    ) -> None:
        desired = DesiredSession(session_id, platform.value, state, reason, self.clock.time())
        self.desired[session_id] = desired
        if self.store is not None:
            await self.store.set_desired(desired, fenced=fenced)

    async def _quietly(self, call: Awaitable[object]) -> None:
        """A session-book write that fails is not the session's failure: the store reports its health."""
        with contextlib.suppress(StoreError):
            await call

    def _on_event(self, published: Published) -> None:
        event = published.event
        tg, store = self._tg, self.store
        if isinstance(event, PacingChanged):
            if event.reason == THROTTLED and tg is not None and store is not None:
                # a cut: the limit it learned is kept at once, so a kill -9 does not lose it
                tg.start_soon(self._quietly, self.keep_limits(event.endpoint))
            return
        if (
            not isinstance(event, SessionTransition)
            or event.target is not SessionState.ACTIVE
            or tg is None
            or store is None
        ):
            return
        runner = self.sessions.runners.get(event.session_id)
        if runner is None:
            return
        record = _record_of(runner)
        opened = OpenedSession(
            event.session_id, runner.context.conversation_id, record.get("platformSessionId")
        )
        if self._opened_rows is None:
            self._opened_rows = OpenedRows(store)
        tg.start_soon(self._opened_rows.write, opened)


async def _read_only(path: Path) -> Snapshot | None:
    """What the store holds, read without writing; None when the file is absent, not the store's or
    unreadable too (the sessions then run from the configuration alone)."""
    try:
        return await read_only(path)
    except StoreError:
        return None


def _of(rows: Mapping[str, T], shards: frozenset[int]) -> dict[str, T]:
    """The rows of ``rows`` (by session id) whose session is in ``shards``."""
    return {k: v for k, v in rows.items() if shard_of(k) in shards}


def _record_of(runner: SessionRunner) -> dict[str, str]:
    transport: Any = runner.transport
    record = getattr(transport, "resume_record", None)
    return dict(record()) if callable(record) else {}


class _Health:
    """The store's health moves, told to subscribers (and once on stderr, through ``warn``)."""

    def __init__(self, path: str, bus: EventBus, clock: Clock, warn: Warn | None) -> None:
        self._path, self._bus, self._clock, self._warn = path, bus, clock, warn

    def __call__(self, problem: str | None) -> None:
        now = iso_utc(self._clock.time())
        if problem is None:
            self._bus.publish(StoreRecovered(self._path, timestamp=now))
            return
        self._bus.publish(StoreDegraded(self._path, problem, timestamp=now))
        if self._warn is not None:
            self._warn(
                f"store: {self._path}: {problem} (attribute updates are refused; sessions keep running)"
            )
