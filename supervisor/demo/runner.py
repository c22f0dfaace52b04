"""The demo's orchestration: simulators, daemon, faults, outcome, summary.

1. start both simulators in-process on loopback (free ports);
2. build the daemon's config (credential files in a temporary directory) and run the daemon
   ``run`` assembles (supervisor/runtime/assembly.py: the same parts, the same lifecycle) with the
   scenario as its body;
3. wait until every session is active;
4. inject the scenario's faults through the simulators' Python API;
5. wait, with a bounded deadline, until the outcome settles: every counted fault spent,
   the expected sessions disrupted and terminated, every survivor active again, and the
   scenario's minimum observation time passed;
6. collect the summary, judge it against the scenario's expected outcome, shut down.
"""

from __future__ import annotations

import random
import re
import resource
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus
from rich.console import Console

from supervisor.attributes import AttributeService
from supervisor.clock import SystemClock
from supervisor.config import PROMETHEUS_ADDRESS, TelemetrySettings
from supervisor.demo.attributes_play import AttributesPlay
from supervisor.demo.observe import Observer
from supervisor.demo.progress import Progress
from supervisor.demo.scenarios import FAST, REAL, SCENARIOS, Fleet, Injection, Scenario, Timing
from supervisor.demo.summary import Baseline, collect
from supervisor.demo.wiring import (
    cxone_sim_config,
    daemon_config,
    genesys_sim_config,
    scaled_taxonomy,
    session_specs,
    write_credentials,
)
from supervisor.errors import ConfigError, SupervisorError
from supervisor.runtime.assembly import Daemon, DaemonConfig, DaemonView, SocketsAt
from supervisor.runtime.main import Service
from supervisor.runtime.sessions import SessionReader
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimulator
from supervisor.vocabulary import CircuitState, SessionState

if TYPE_CHECKING:
    from supervisor.telemetry import ExportSettings


@dataclass(frozen=True, slots=True)
class DemoOptions:
    scenario: str = "mixed"
    sessions: int = 50
    seed: int = 1
    fast: bool = False
    timeout_s: float | None = None
    # an OTLP/HTTP collector's base URL: traces and metrics of the run go there (docs/telemetry.md)
    otlp: str | None = None
    # a Prometheus scrape endpoint's address (``[telemetry] prometheus``'s form): the run's metrics, pulled
    prometheus: str | None = None


class _Run:
    """One demo run's moving parts (see the module docstring for the steps)."""

    def __init__(self, options: DemoOptions, scenario: Scenario, timing: Timing) -> None:
        self.options = options
        self.scenario = scenario
        self.timing = timing
        self.fleet = Fleet.of(options.sessions)
        self.clock = SystemClock()
        self.phase = "starting"
        self.problems: list[str] = []
        self.injected: list[tuple[Injection, str]] = []
        # what the progress display shows once the summary is taken (shutdown stops everyone)
        self.final: tuple[Mapping[SessionState, int], list[str]] | None = None
        # the attributes scenario's burst (supervisor/demo/attributes_play.py)
        self.play: AttributesPlay | None = None

    async def execute(
        self,
        workdir: Path,
        progress: Console | None,
        on_sockets: Callable[[tuple[Path, Path] | str], object] | None = None,
    ) -> dict[str, Any] | None:
        """The run's summary, or None when a stop signal interrupted it before the outcome."""
        opts, scenario, timing = self.options, self.scenario, self.timing
        credentials = write_credentials(workdir)
        taxonomy = scaled_taxonomy(workdir, timing.backoff_scale)
        started = self.clock.monotonic()
        async with (
            GenesysSimulator(genesys_sim_config(scenario, timing), seed=opts.seed) as genesys,
            CxoneSimulator(cxone_sim_config(scenario, timing), seed=opts.seed) as cxone,
        ):
            if scenario.play == "attributes":
                self.play = AttributesPlay.prepare(genesys, [s["id"] for s in session_specs(self.fleet)])
            config = daemon_config(
                fleet=self.fleet,
                scenario=scenario,
                timing=timing,
                genesys_urls=genesys.urls,
                cxone_urls=cxone.urls,
                credentials=credentials,
                taxonomy=taxonomy,
                seed=opts.seed,
                conversations=None if self.play is None else self.play.conversations,
                store=None if self.play is None else workdir / "store.sqlite3",
            )
            scene = _Scene(self, genesys, cxone, progress, started)
            # the daemon `run` assembles (supervisor/runtime/assembly.py), with the simulators' URLs,
            # the scenario as its body, its sockets in the run's temporary directory (`watch` attaches
            # from another terminal), and no service parts: no event lines, no systemd, no lock
            await Daemon(
                DaemonConfig(
                    config,
                    config_dir=workdir,
                    environ={},
                    clock=self.clock,
                    rng=random.Random(opts.seed),
                    grace_s=_GRACE_S,
                    telemetry=(
                        None
                        if opts.otlp is None and opts.prometheus is None
                        else demo_settings(opts.otlp, workdir, prometheus=opts.prometheus)
                    ),
                    sockets=SocketsAt(workdir / "subscribe.sock", workdir / "control.sock", on_sockets),
                    # the durable store (docs/attributes.md), in the run's temporary directory: the attributes scenario
                    durable=self.play is not None,
                    service=False,
                    body=scene,
                )
            ).serve()
        summary = scene.summary
        if summary is None:
            return None
        problems = self.problems + (scenario.check(summary) if not self.problems else [])
        summary["outcome"] = {"ok": not problems, "problems": problems}
        return summary

    def _progress_service(self, console: Console, daemon: DaemonView, observer: Observer) -> Service:
        display = Progress(console, self.clock, self._sampler(daemon, observer), self.scenario.name)

        async def serve(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            await display.run()

        return serve

    # -- steps ----------------------------------------------------------------------------------------

    async def _wait(self, observer: Observer, condition: Callable[[], bool]) -> None:
        while not condition():
            await observer.changed(0.25)

    async def _play(
        self, play: AttributesPlay, attributes: AttributeService, genesys: GenesysSimulator
    ) -> None:
        self.phase = "attribute burst"
        await play.run(attributes, genesys, fast=self.timing.fast)
        self.phase = "fault injected"

    def _inject(self, genesys: GenesysSimulator, cxone: CxoneSimulator) -> None:
        for injection in self.scenario.faults(self.fleet, self.timing):
            target = genesys.faults if injection.sim == "genesys" else cxone.faults
            stored = target.inject(injection.fault)
            self.injected.append((injection, stored.id or "?"))

    def _settled(
        self, observer: Observer, genesys: GenesysSimulator, cxone: CxoneSimulator, since: float
    ) -> bool:
        held = self._recovered(observer, genesys, cxone)
        left = self.scenario.hold(self.timing) - (self.clock.monotonic() - since)
        if held and left > 0:
            # everything else is met: say what the run still waits for, not a silent "fault injected"
            self.phase = f"waiting for {self.scenario.holding_for} ({left:.0f} s left)"
        return held and left <= 0

    def _recovered(self, observer: Observer, genesys: GenesysSimulator, cxone: CxoneSimulator) -> bool:
        """Whether the scenario's outcome is reached, its hold aside."""
        if self.play is not None:
            # the burst settles (every update verified, repaired or flagged), whatever faults are left
            return self.play.finished and observer.all_survivors_active()
        for sim in (genesys, cxone):
            if any(f.count is not None for f in sim.faults.active()):
                return False  # a counted fault has hits left
        if len(observer.disrupted) < self.scenario.disrupted(self.fleet):
            return False
        if observer.count(SessionState.TERMINATED) < self.scenario.terminations(self.fleet):
            return False
        return observer.all_survivors_active()

    def _faults(self, genesys: GenesysSimulator, cxone: CxoneSimulator) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for injection, fid in self.injected:
            sim = genesys if injection.sim == "genesys" else cxone
            fault = injection.fault
            out.append(
                {
                    "simulator": injection.sim,
                    "id": fid,
                    "kind": fault.kind.value,
                    "endpoint": fault.endpoint,
                    "share": fault.share,
                    "count": fault.count,
                    "params": dict(fault.params),
                    "hits": sim.recorder.fault_hits(fid),
                }
            )
        return out

    def _sampler(
        self, daemon: DaemonView, observer: Observer
    ) -> Callable[[], tuple[str, Mapping[SessionState, int], list[str], int]]:
        def sample() -> tuple[str, Mapping[SessionState, int], list[str], int]:
            if self.final is not None:
                return self.phase, self.final[0], self.final[1], observer.events
            circuits = sorted(
                str(endpoint)
                for endpoint, b in daemon.circuits.all().items()
                if b.state is not CircuitState.CLOSED
            )
            return self.phase, daemon.sessions.states(), circuits, observer.events

        return sample


class _Scene:
    """The demo's body for the daemon (a :class:`~supervisor.runtime.assembly.Body`): the observer on
    the bus, the progress display, then the scenario itself (steps 3 to 6 of the module docstring)."""

    def __init__(
        self,
        run: _Run,
        genesys: GenesysSimulator,
        cxone: CxoneSimulator,
        progress: Console | None,
        started: float,
    ) -> None:
        self.run = run
        self.genesys = genesys
        self.cxone = cxone
        self.progress = progress
        self.started = started
        self.daemon: DaemonView | None = None
        self.observer: Observer | None = None
        #: taken before the drain (shutdown stops everyone); None when a stop signal came first
        self.summary: dict[str, Any] | None = None

    def attach(self, daemon: DaemonView) -> list[Service]:
        self.daemon = daemon
        sessions = daemon.sessions
        self.observer = Observer(self.run.clock, lambda sid: _connects(sessions, sid))
        daemon.bus.subscribe(self.observer)
        if self.progress is None:
            return []
        return [self.run._progress_service(self.progress, daemon, self.observer)]

    async def __call__(self) -> None:
        run, daemon, observer = self.run, self.daemon, self.observer
        assert daemon is not None and observer is not None  # attached before the daemon serves
        opts, scenario, timing = run.options, run.scenario, run.timing
        genesys, cxone = self.genesys, self.cxone
        baseline: Baseline | None = None
        limit = opts.timeout_s if opts.timeout_s is not None else timing.deadline_for(opts.sessions)
        # the drain and the simulators' shutdown fit in the rest of --timeout
        deadline = max(limit - reserve_s(limit), limit / 2)
        with anyio.move_on_after(deadline) as scope:
            await run._wait(observer, lambda: _started(daemon.sessions, run.fleet.sessions))
            if daemon.sessions.states().get(SessionState.TERMINATED):
                run.problems.append("a session terminated before the scenario started")
            else:
                run.phase = "fault injected"
                baseline = Baseline.take(genesys, cxone)
                observer.mark_fault()
                run._inject(genesys, cxone)
                injected_at = run.clock.monotonic()
                async with anyio.create_task_group() as acts:
                    if run.play is not None and daemon.attributes is not None:
                        acts.start_soon(run._play, run.play, daemon.attributes, genesys)
                    await run._wait(observer, lambda: run._settled(observer, genesys, cxone, injected_at))
        if scope.cancelled_caught:
            run.problems.append(f"timed out after {limit:g} s while {run.phase}")
        # the summary is taken, then the daemon drains (what a hard bound may still cut)
        run.phase = "draining"
        # taken before the drain: shutdown stops everyone
        summary = collect(
            scenario=scenario,
            fleet=run.fleet,
            seed=opts.seed,
            fast=timing.fast,
            daemon=daemon,
            genesys=genesys,
            cxone=cxone,
            observer=observer,
            baseline=baseline,
            admission=None if scenario.admission is None else scenario.admission(run.fleet, timing),
            elapsed_s=run.clock.monotonic() - self.started,
            faults=run._faults(genesys, cxone),
        )
        if run.play is not None and daemon.attributes is not None:
            summary["attributes"] = await run.play.summary(daemon.attributes, genesys)
        run.final = ({SessionState(k): n for k, n in summary["states"].items()}, summary["openCircuits"])
        self.summary = summary


_GRACE_S = 5.0
DEMO_SERVICE_NAME = "session-supervisor-demo"


def demo_settings(otlp: str | None, workdir: Path | None, *, prometheus: str | None = None) -> ExportSettings:
    """``demo --otlp URL --prometheus ADDRESS``'s export settings; raises ConfigError (the CLI checks
    them before anything starts).

    The demo's environment is its own: no OTEL_* variable of the shell changes the run. What the
    OpenTelemetry SDK reads from the process environment whatever it is handed (at its import, in
    its exporters) is still checked, and a value it would refuse is a ConfigError naming it.
    """
    from supervisor.telemetry import resolve_settings

    if prometheus is not None and not re.match(PROMETHEUS_ADDRESS, prometheus):
        raise ConfigError(f"--prometheus: expected HOST:PORT or PORT, got {prometheus!r}")
    table = TelemetrySettings(
        endpoint=otlp, sample_ratio=1.0, service_name=DEMO_SERVICE_NAME, prometheus=prometheus
    )
    settings = resolve_settings(table, {}, config_dir=workdir, prometheus_key="--prometheus")
    if settings is None:  # pragma: no cover - an endpoint always turns it on
        raise ConfigError("--otlp: telemetry stayed off")
    return settings


def _started(sessions: SessionReader, count: int) -> bool:
    states = sessions.states()
    return states.get(SessionState.ACTIVE, 0) == count or states.get(SessionState.TERMINATED, 0) > 0


def _connects(sessions: SessionReader, session_id: str) -> int:
    runner = sessions.runners.get(session_id)
    return 0 if runner is None else runner.connects


#: open files per session: both ends of its connection (the simulators run in this process) and one
#: spare for a reconnection in flight or a CXone call beside its long poll
FILES_PER_SESSION = 3
FILES_BASE = 256


def files_needed(sessions: int) -> int:
    return FILES_PER_SESSION * sessions + FILES_BASE


def _raise_nofile(sessions: int) -> None:
    """Raise the soft RLIMIT_NOFILE to what ``sessions`` need, or refuse when the hard limit cannot hold them."""
    wanted = files_needed(sessions)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        most = max(0, (hard - FILES_BASE) // FILES_PER_SESSION)
        raise DemoRefused(
            f"--sessions {sessions} needs about {wanted} open files (the simulators hold the other end of "
            f"every connection in this process); this process may open at most {hard} (RLIMIT_NOFILE): "
            f"use --sessions {most} or fewer, or raise the limit (ulimit -Hn)"
        )
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class DemoRefused(SupervisorError):
    """The demo cannot run as asked on this machine (the message says why and what would work)."""


class DemoTimedOut(SupervisorError):
    """The demo outlasted its --timeout: a hard bound, whatever it was doing.

    :attr:`summary` is what can still be said: the scenario, its size and a failed outcome
    (the command prints it with --json, so a script reading stdout gets its one object).
    """

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


def reserve_s(limit_s: float) -> float:
    """Time kept from --timeout for the drain (5 s grace) and closing the simulators."""
    return min(15.0, limit_s / 4)


def timing_for(fast: bool) -> Timing:
    return FAST if fast else REAL


async def run_demo(
    options: DemoOptions,
    *,
    progress: Console | None = None,
    on_sockets: Callable[[tuple[Path, Path] | str], object] | None = None,
) -> dict[str, Any] | None:
    """Run one scenario and return its summary (``summary["outcome"]["ok"]`` says if it matched).

    None when a stop signal (SIGINT, SIGTERM) or the control socket's drain interrupted it: the
    daemon drained as ``run``'s does. ``on_sockets`` is told, before the sessions start, where the
    socket API listens (``(subscribe, control)``, in the run's temporary directory) or why it does not.
    Raises ``KeyError`` for an unknown scenario (the CLI checks the name first).
    """
    scenario = SCENARIOS[options.scenario]
    _raise_nofile(options.sessions)
    timing = timing_for(options.fast)
    run = _Run(options, scenario, timing)
    limit = options.timeout_s if options.timeout_s is not None else timing.deadline_for(options.sessions)
    # --timeout is a hard bound on the whole run: the scenario itself gets what is left after a
    # reserve for the drain and the simulators' shutdown (see _Run.execute), and if anything still
    # hangs past the bound (thousands of sessions starting or closing), everything is cancelled
    with tempfile.TemporaryDirectory(prefix="session-supervisor-demo-") as workdir:
        with anyio.move_on_after(limit) as bound:
            return await run.execute(Path(workdir), progress, on_sockets)
    if bound.cancelled_caught:
        problem = f"timed out after {limit:g} s (--timeout, a hard bound) while {run.phase}"
        # the scenario's own cut (it gets what --timeout leaves after the drain's reserve) comes
        # first: it names where the scenario stopped, which the hard bound alone cannot
        problems = [*run.problems, problem]
        summary = {
            "scenario": scenario.name,
            "sessions": options.sessions,
            "seed": options.seed,
            "fast": options.fast,
            "expected": scenario.expected,
            "outcome": {"ok": False, "problems": problems},
        }
        raise DemoTimedOut(f"demo {scenario.name}: {'; then '.join(problems)}", summary)
    return None  # pragma: no cover - the with block returns unless cancelled
