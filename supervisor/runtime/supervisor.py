"""The supervisor: owns the session runners and their task group.

Started with ``await tg.start(supervisor.serve)``: :meth:`Supervisor.serve` opens the task
group the runners live in, hands every configured session over (a runner created and its task
started: its first attempt is scheduled, not necessarily made, since paced start-up can take
longer than a service manager's start timeout), and only then reports itself started. That
moment is what the lifecycle (supervisor/runtime/main.py) waits for before it says the daemon
is ready.

It runs the sessions of the shards its :class:`~supervisor.runtime.leases.Leases` give it (one host:
SoloLeases, every shard): as their :class:`~supervisor.runtime.leases.LeaseHolder` it loads a shard it
acquires and starts its sessions, and abandons the sessions of a shard it loses (docs/runtime.md,
"Shards and leases").

The supervisor fronts what callers do with sessions: start one (a full authentication cycle),
stop one, drain all, a REST call or a message on a session's behalf, and a status summary. It
writes the :class:`~supervisor.runtime.sessions.SessionTable` it is given (or makes one); readers
(the socket API, the systemd glue, the store, the demo) are handed the table, not the supervisor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup, TaskStatus

from supervisor.config import Config, Secret, SessionSpec
from supervisor.errors import ConfigError, OperationError, SessionError, StoreError
from supervisor.fleet.follow import DesiredFollower, Follow, decide
from supervisor.runtime.circuits import ManualCircuits
from supervisor.runtime.fence import WriteFence
from supervisor.runtime.leases import Lease, LeaseOwners, Leases, SoloLeases
from supervisor.runtime.platform_sinks import session_describer
from supervisor.runtime.session_runner import SessionRunner
from supervisor.runtime.sessions import SessionBook, SessionTable
from supervisor.runtime.tenancy import scope_of, spec_scope
from supervisor.runtime.wiring import Rotation, Wiring
from supervisor.store.model import DesiredSession
from supervisor.store.shards import shard_of
from supervisor.taxonomy import Channel
from supervisor.vocabulary import CircuitState, CloseCode, EndpointId, Scope, SessionState

__all__ = ["NO_STORE", "Supervisor", "session_table"]

#: why a session cannot be added without a store (it would not survive a restart)
NO_STORE = "no store to keep added sessions in: set [store] path, or run under systemd with StateDirectory="


def session_table(wiring: Wiring) -> SessionTable:
    """An empty table for ``wiring``'s configuration; the endpoint of a session is the circuit its
    transport connects through (Wiring.transport_for; no I/O happens before a transport opens)."""
    return SessionTable(wiring.config, endpoint_for=lambda spec: wiring.transport_for(spec)[1])


class Supervisor:
    """Every supervised session, under one task group of its own; the :class:`LeaseHolder` of its leases."""

    def __init__(
        self,
        wiring: Wiring,
        book: SessionBook | None = None,
        *,
        sessions: SessionTable | None = None,
        leases: Leases | None = None,
        fence: WriteFence | None = None,
    ) -> None:
        if book is not None and sessions is None:
            # a book reads the table it was built over: a second one here would stay empty for it
            raise TypeError("Supervisor: pass the session table the book was built over (sessions=...)")
        self.wiring = wiring
        # the durable state (docs/attributes.md): desired sessions, the session ledger; None keeps nothing
        self.book = book
        self.bus = wiring.bus
        #: the runners by session id and the configuration in force; this supervisor alone writes it
        self.sessions = sessions if sessions is not None else session_table(wiring)
        # the platform events name each session's platform and agent as the table knows them
        wiring.platform_events.describe_with(session_describer(self.sessions))
        # the gaps it finds are closed for these sessions (supervisor/runtime/resync.py)
        wiring.resyncer.attach(self.sessions)
        # set when each runner's task has ended (its close sent, its DELETE made), keyed by the
        # runner itself: a session id may have an old runner still closing and a new one starting
        self._done: dict[SessionRunner, anyio.Event] = {}
        self._tg: TaskGroup | None = None
        #: set once the drain began: no session is started from then on, and a reload in progress
        #: stops where it is (supervisor/runtime/reload.py)
        self.draining = anyio.Event()
        #: ``ctl circuit isolate|close|reset`` and the end of an isolation's ``--for``
        self.manual_circuits = ManualCircuits(
            wiring.attempts, lambda: self.config, bus=wiring.bus, clock=wiring.clock, sleep=wiring.sleep
        )
        #: ``ctl drain --end-sessions`` asked the drain to end every session, store or not
        self._end_sessions = False
        #: the shards this process owns (supervisor/runtime/leases.py): one host owns them all, at
        #: the epoch its store took when it opened
        self.leases: Leases = leases if leases is not None else SoloLeases(0 if book is None else book.epoch)
        #: who answers for a session: the one lookup the socket API's verbs go through
        self.owners = LeaseOwners(self.leases)
        #: a fleet member's write fence (supervisor/runtime/fence.py): every byte for a session checked
        #: against its shard's lease deadline. One host's leases never end: no fence, today's pools
        self.fence: WriteFence | None = None
        if not isinstance(self.leases, SoloLeases):
            self.fence = (
                fence if fence is not None else WriteFence(loop_lag_s=self.config.fleet.loop_lag_seconds)
            )
            wiring.use_fence(self.fence)
            self.leases.subscribe_deadlines(self.fence.follow)
            # the test-only stamp: a session's requests carry its shard's lease epoch (supervisor/stamp.py)
            wiring.stamper.shard_epoch = self._lease_epoch
        # runners abandoned because their shard was lost: their end writes nothing to the store
        self._abandoned: set[SessionRunner] = set()
        #: the commands other fleet members wrote for sessions of ours, followed (the fleet bus's
        #: ``ss_desired`` and ``ss_attributes`` handlers: supervisor/fleet/follow.py)
        self.follower = DesiredFollower(
            self.leases.identity,
            owns=self.owns,
            follow=self.follow_desired,
            attributes=None if book is None else book.follow_attributes,
            everything=self.follow_every_desired,
        )

    @property
    def config(self) -> Config:
        return self.sessions.config

    @property
    def runners(self) -> Mapping[str, SessionRunner]:
        """Every session with a runner (read-only: the table is written through this supervisor)."""
        return self.sessions.runners

    def reconfigure(
        self,
        config: Config,
        secrets: dict[Scope, tuple[Secret | None, ...]],
        rotations: Sequence[Rotation] = (),
    ) -> list[httpx.AsyncClient]:
        """Adopt a reloaded configuration: the wiring's platforms (``rotations``: the credentials
        whose token source is swapped), the table's entries, and every running session's
        reconnection settings (its next reconnection uses them) and platform token cache.

        Returns the HTTP clients no longer used, for the caller to close once the sessions that used
        them are stopped (Wiring.reconfigure).
        """
        retired = self.wiring.reconfigure(config, secrets, rotations)
        self.sessions.configure(config)
        for runner in self.runners.values():
            runner.core.configure(self.wiring.session_config)
            # a rebuilt platform's new token cache (the same cache unless the platform was rebuilt)
            runner.use_tokens(
                self.wiring.tokens.get(scope_of(runner.context.tenant, runner.context.platform))
            )
        return retired

    # ------------------------------------------------------------------ lifecycle
    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; started once the sessions of every shard the leases gave at start are
        handed over (one host: every configured session)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                await tg.start(self.manual_circuits.serve)
                # the reads that close the platform stream's gaps run in this group
                await tg.start(self.wiring.resyncer.serve)
                # the shared notification channels run in this group (their sessions' runners do not)
                await tg.start(self.wiring.channel_pools.serve)
                if self.book is not None:
                    await tg.start(self.book.serve)
                # what other fleet members write for our sessions, followed from the first shard on
                await tg.start(self.follower.serve)
                if self.fence is not None:
                    # the watchdog (sockets aborted at their deadline) and the loop-lag guard
                    await tg.start(self.fence.serve)
                # start-up goes through the leases: each shard acquired is loaded and its sessions started
                await tg.start(self.leases.serve, self)
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None

    # ------------------------------------------------------------------ shards (the LeaseHolder)
    def _lease_epoch(self, shard: int) -> int | None:
        """The epoch of this process's lease on ``shard`` (None: not held here)."""
        lease = self.leases.owned().get(shard)
        return None if lease is None else lease.epoch

    def owns(self, session_id: str) -> bool:
        """This process owns the session's shard."""
        return shard_of(session_id) in self.leases.owned()

    async def acquired(self, leases: Sequence[Lease]) -> None:
        """Shards now this process's: each loaded from the store, its sessions started (or resumed,
        or kept down as the store says), then its orphans, and only its, ended."""
        shards = frozenset(lease.shard for lease in leases)
        if self.fence is not None:
            # the new shards' sockets may write from now on, until their deadlines
            self.fence.follow(self.leases.owned())
        if self._tg is None or self.draining.is_set() or not shards:
            return
        book = self.book
        if book is not None:
            # a fleet member runs only the shards whose rows could be read (Durable.acquire)
            shards = await book.acquire(shards)
            # the sessions added over the control socket before this start: entries again
            for spec in book.added_sessions(self.config):
                if shard_of(spec.id) in shards and spec.id not in self.sessions.added:
                    self.sessions.add(spec)
            self._count_added()
        for spec in [*self.config.sessions, *self.sessions.added.values()]:
            if shard_of(spec.id) not in shards:
                continue
            current = self.runners.get(spec.id)
            if current is not None and not current.core.terminated:
                continue  # still served (a shard given again before its loss was told)
            plan = book.plan(spec) if book is not None else None
            if plan is None:
                self.start(spec)
            elif plan.start:
                # a session stopped or ended by a fail-fast stays down until `ctl start`
                self.start(spec, plan.resume)
        if book is not None:
            book.planned(shards)

    async def lost(self, shards: Collection[int]) -> None:
        """Shards no longer this process's: their sessions abandoned (left alive on the platform: no
        DELETE, no closeSession) and nothing written to the store, which the next owner reads."""
        gone = frozenset(shards)
        if self.fence is not None:
            # their topics leave the shared channels (one PUT per channel of the topics that stay) ...
            self.wiring.channel_pools.shards_lost(gone)
            # ... and not one more byte for them: their own sockets reset now
            self.fence.follow({s: lease for s, lease in self.leases.owned().items() if s not in gone})
        for runner in list(self.runners.values()):
            if shard_of(runner.session_id) in gone and not runner.core.terminated:
                self._abandoned.add(runner)
                runner.hand_over()
        if self.book is not None:
            self.book.release(gone)

    async def follow_desired(self, session_id: str) -> None:
        """Another fleet member wrote the desired row of a session of ours: re-read, and do what it says
        (supervisor/fleet/follow.py, ``decide``); the row is already written, so nothing is written back."""
        book = self.book
        if book is None or self._tg is None or self.draining.is_set() or not self.owns(session_id):
            return
        await self._follow_row(session_id, await book.reread(session_id))

    async def _follow_row(self, session_id: str, row: DesiredSession | None) -> None:
        """Do what ``row`` (just read) asks of a session of ours (supervisor/fleet/follow.py, ``decide``)."""
        book = self.book
        if book is None or self._tg is None or self.draining.is_set():
            return
        runner = self.runners.get(session_id)
        running = runner is not None and not runner.core.terminated
        action = decide(row, running=running, added=session_id in self.sessions.added)
        if action is Follow.START:
            spec = self.sessions.spec(session_id)
            if spec is None:
                # added over another member's control socket: its entry is the row's
                spec = next((s for s in book.added_sessions(self.config) if s.id == session_id), None)
                if spec is None:
                    return  # this configuration cannot run it (its platform's table gone)
                self.sessions.add(spec)
                self._count_added()
            self.start(spec)
        elif action is Follow.STOP:
            await self.stop(session_id, CloseCode.NORMAL_CLOSURE)
        elif action is Follow.REMOVE:
            await self.remove_session(session_id)

    async def follow_every_desired(self) -> None:
        """Every desired row of the owned shards followed again (the fleet bus lost notices while it
        was reconnecting): each session whose row another member changed meanwhile is acted on."""
        book = self.book
        if book is None:
            return
        rows = await book.reread_shards(self.leases.owned().keys())
        for session_id in sorted(rows.keys() | self.sessions.added.keys()):
            if self.owns(session_id):
                await self._follow_row(session_id, rows.get(session_id))

    def start(self, spec: SessionSpec, resume: Mapping[str, str] | None = None) -> SessionRunner:
        """Start supervising one session (a new machine: a full authentication cycle, or, at start-up,
        the resumption of the server session a restart left: ``resume``). Raises NotOwner for a
        session whose shard this process does not own."""
        tg = self._tg
        if tg is None or self.draining.is_set():
            raise ConfigError(f"sessions[{spec.id}]: the supervisor is not accepting sessions")
        self.owners.require(spec.id)
        previous = self.runners.get(spec.id)
        if previous is not None and not previous.core.terminated:
            raise ConfigError(f"session '{spec.id}' is already supervised")
        runner = self.wiring.runner_for(spec, resume)
        self.sessions.put(runner)
        done = self._done[runner] = anyio.Event()
        tg.start_soon(self._run_runner, runner, done, resume is not None, name=f"session:{spec.id}")
        return runner

    # ------------------------------------------------------------------ sessions as data
    async def add_sessions(self, specs: Sequence[SessionSpec]) -> list[SessionRunner]:
        """Sessions added over the control socket (validated by the caller, ids new to the daemon):
        kept in the store first (they survive restarts and reloads), then started; their first
        attempts are admitted by their endpoints as start-up's are (docs/runtime.md, "Admission").

        Raises StoreError when they cannot be kept (no store, or a failed write): nothing is added."""
        book = self.book
        if book is None:
            raise StoreError("store", NO_STORE)
        if self._tg is None or self.draining.is_set():
            raise ConfigError("the supervisor is not accepting sessions")
        await book.keep_added(specs)
        for spec in specs:
            self.sessions.add(spec)
        self._count_added()
        return [self.start(spec) for spec in specs]

    async def remove_session(self, session_id: str) -> None:
        """A session added over the control socket is closed as ``stop`` closes it (close 1000, CXone
        DELETE), waited for, and forgotten (its store row too): it stays gone after a restart."""
        runner = self.runners.get(session_id)
        if runner is not None:
            await self._stop_and_wait(runner, CloseCode.NORMAL_CLOSURE)
            self.sessions.discard(runner)
        self.sessions.drop(session_id)
        self._count_added()
        if self.book is not None:
            await self.book.forget(session_id)

    def _count_added(self) -> None:
        """The HTTP pools grow with the added sessions of each platform (Wiring.grow)."""
        counts = Counter(spec_scope(spec) for spec in self.sessions.added.values())
        for platform, added in counts.items():
            if added > self.wiring.added.get(platform, 0):
                self.wiring.grow(platform, added)

    async def _run_runner(self, runner: SessionRunner, done: anyio.Event, resumed: bool = False) -> None:
        try:
            if self.book is not None:
                # write-ahead: a crash after the first attempt leaves what a restart takes over or ends
                await self.book.opening(runner, resumed)
            await runner.run()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.transport.aclose()
                abandoned = runner in self._abandoned
                self._abandoned.discard(runner)
                # a session abandoned with its shard is the next owner's: nothing written about it
                if self.book is not None and not abandoned:
                    await self.book.ended(runner, draining=self.draining.is_set())
            done.set()
            del self._done[runner]

    def finished(self, runner: SessionRunner) -> bool:
        """``runner``'s task has ended: its connection let go of, its end written (or, abandoned, not)."""
        return runner not in self._done

    async def stop(self, session_id: str, code: CloseCode = CloseCode.NORMAL_CLOSURE) -> None:
        """End one session on purpose (close 1000 / DELETE); unknown ids raise SessionError."""
        await self._runner(session_id).stop(code)

    async def _stop_and_wait(self, runner: SessionRunner, code: CloseCode) -> None:
        """Stop one runner and wait for its task to end (its close sent, its DELETE made)."""
        await runner.stop(code)
        done = self._done.get(runner)
        if done is not None:
            await done.wait()

    # ------------------------------------------------------------------ what a reload changes
    # A reload (supervisor/runtime/reload.py) runs one at a time, but `ctl start` / `ctl stop` and
    # the drain may act on the same session while it waits for a close: each step below touches
    # only the runner it found, and none raises for a session that is down or already replaced.

    def add(self, spec: SessionSpec) -> SessionRunner | None:
        """A session the configuration gained: started, unless a live runner already serves it
        (``ctl start`` came first, on the same new configuration) or the drain has begun."""
        current = self.runners.get(spec.id)
        if self.draining.is_set() or (current is not None and not current.core.terminated):
            return None
        if not self.owns(spec.id):
            return None  # its shard's owner starts it
        return self.start(spec)

    async def remove(self, session_id: str) -> None:
        """Stop a session that left the configuration, and forget it.

        Only the runner found here is stopped and taken out of the table: one started for the same
        id while this one was closing (a later reload, ``ctl start``) is not this removal's to end.
        A session with no runner (the store kept it stopped or ended at start-up) is just forgotten.
        """
        runner = self.runners.get(session_id)
        if runner is not None:
            await self._stop_and_wait(runner, CloseCode.NORMAL_CLOSURE)
            self.sessions.discard(runner)
        if self.book is not None and session_id not in self.runners:
            await self.book.forget(session_id)

    async def restart(self, spec: SessionSpec) -> SessionRunner | None:
        """Stop a session whose settings changed and start it again (a new runner, a full cycle).

        A session that is down (``ctl stop``, a fail-fast, or kept down by the store at start-up)
        stays down: a reload never re-authenticates what only ``ctl start`` may bring back (seed
        section 3); ``ctl start`` then starts it on the new settings. Returns the runner now
        serving the session, or None when it stays down.
        """
        runner = self.runners.get(spec.id)
        if runner is None or runner.core.terminated:
            return None
        await self._stop_and_wait(runner, CloseCode.NORMAL_CLOSURE)
        current = self.runners.get(spec.id)
        if current is not runner and current is not None and not current.core.terminated:
            return current  # `ctl start` started it again meanwhile, on the new configuration
        return self.add(spec)

    def end_sessions_at_drain(self) -> None:
        """``ctl drain --end-sessions``: the drain ends every session instead of handing it over."""
        self._end_sessions = True

    @property
    def hands_over(self) -> bool:
        """What a drain now does to the sessions: True hands them over (left alive on the platform for
        the next start), False ends them (guests closeSession'd, CXone agent sessions DELETEd)."""
        return self.book is not None and self.book.hands_over() and not self._end_sessions

    async def shutdown(self, grace_s: float) -> None:
        """Stop intake, hand every session over (a store) or close it with 1001 (going away, ended
        on the platform), wait at most ``grace_s``."""
        hand_over = self.hands_over
        self.draining.set()
        if self.book is not None:
            self.book.draining()
        # asked to end them (``ctl drain --end-sessions``, ``handover.onStop = "end"``): 1000, so a guest
        # session gets closeSession and the ledger closes it; else (no store) 1001 as it always was
        ended = self._end_sessions or (self.book is not None and self.book.ends_at_stop())
        code = CloseCode.NORMAL_CLOSURE if ended else CloseCode.GOING_AWAY
        for runner in list(self.runners.values()):
            if hand_over:
                runner.hand_over()
            else:
                await runner.stop(code)
        # not shielded: a second signal cancels the drain at once (supervisor/runtime/main.py)
        with anyio.move_on_after(grace_s):
            for done in list(self._done.values()):
                await done.wait()

    # ------------------------------------------------------------------ on a session's behalf
    def _runner(self, session_id: str) -> SessionRunner:
        runner = self.runners.get(session_id)
        if runner is None:
            raise SessionError(f"no session '{session_id}' is supervised")
        return runner

    async def request(self, session_id: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """A REST call on behalf of a supervised session, through its platform's pipeline.

        A failure that ends the operation is also fed to the session's machine, so a
        fail-fast trigger (409 on message creation, QUEUE_FULL, 401 invalid_token) ends the
        session at once. Raises OperationError or CircuitOpenError to the caller.
        """
        runner = self._runner(session_id)
        if runner.core.terminated:
            raise SessionError(f"session '{session_id}' is terminated; start it again to re-authenticate")
        context = runner.context
        pipeline = self.wiring.pipeline_for(scope_of(context.tenant, context.platform), session_id)
        kwargs.setdefault("circuit", EndpointId.api(context.platform))
        # the session may be a WebSocket one; this call is REST (it decides the operation's rules)
        kwargs.setdefault("channel", Channel.REST)
        try:
            return await pipeline.request(method, url, ctx=context, **kwargs)
        except OperationError as failure:
            runner.operation_failed(failure.event)
            raise

    async def send_message(
        self,
        session_id: str,
        text: str,
        *,
        metadata: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Mapping[str, Any]:
        """Send a conversation message on a session's live connection (in-band, retried by the
        executor; ``client_id`` its deduplication id, transports/webmessaging.py)."""
        return await self._runner(session_id).send_message(text, metadata=metadata, client_id=client_id)

    async def set_agent_state(self, session_id: str, state: str, reason: str | None = None) -> None:
        """Set a CXone session's agent state (its platform answers with an AgentState event)."""
        await self._runner(session_id).set_agent_state(state, reason)

    # ------------------------------------------------------------------ status
    def states(self) -> dict[SessionState, int]:
        return self.sessions.states()

    def snapshot(self) -> dict[str, Any]:
        return {
            "sessions": len(self.runners),
            "states": self.states(),
            "openCircuits": sorted(
                str(endpoint)
                for endpoint, c in self.wiring.circuits.all().items()
                if c.state is not CircuitState.CLOSED
            ),
            "tokenRefreshes": sum(t.refreshes for t in self.wiring.tokens.values()),
        }
