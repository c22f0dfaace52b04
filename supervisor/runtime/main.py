"""The one lifecycle of the daemon, used by ``run`` and ``demo`` alike.

Structured concurrency from one root task group (anyio; uvicorn's phases)::

    await tg.start(supervisor.serve)      # every configured session handed over
    await tg.start(service) ...           # the socket API, telemetry, the watchdog, ...
    on_ready()                            # the readiness moment: READY=1 hooks in here
    await body()                          # `run`: until a signal or a stop request; `demo`: the scenario
    on_stopping(); supervisor.shutdown()  # drain: close every session with 1001, bounded
    tg.cancel_scope.cancel()

SIGTERM or SIGINT ends ``body`` early and starts the drain, as does setting ``stop`` (the control
socket's ``drain`` verb); a second signal during the drain cancels it at once (the result says the
exit was forced). SIGHUP reloads the configuration (``on_reload``) and the daemon goes on. The
receiver can be opened before the daemon is built (:func:`daemon_signals`), so a signal during
start-up is not lost to the default action (exit 143). Services are callables that accept
anyio's ``task_status`` and call ``task_status.started()`` once they are usable (a socket
bound, an exporter ready); each is started in order, so readiness means all of them are.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any

import anyio

from supervisor.runtime.supervisor import Supervisor

__all__ = ["DAEMON_SIGNALS", "OutsideSignals", "Service", "daemon_signals", "run_daemon"]

# a long-running task that calls ``task_status.started()`` when it is usable
Service = Callable[..., Coroutine[Any, Any, Any]]

#: SIGTERM/SIGINT stop (drain); SIGHUP reloads the configuration (systemd's ExecReload convention)
DAEMON_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class OutsideSignals:
    """Signal handling outside the event loop: before it starts and after it ends.

    Python's default action for SIGTERM is to die with 143, and asyncio puts the default back
    when its receiver closes. Installed before the loop and again after it, these handlers only
    *record* a stop signal (and ignore SIGHUP): a signal during start-up ends the start cleanly
    (exit 0), one that lands at the very end of a drain changes nothing (exit 0 for a completed
    drain, 1 for a forced one), never 143.
    """

    def __init__(self) -> None:
        self.stop_requested = False

    def install(self) -> OutsideSignals:
        for sig in DAEMON_SIGNALS:
            signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, frame: object) -> None:
        if signum != signal.SIGHUP:
            self.stop_requested = True


@contextlib.contextmanager
def daemon_signals() -> Iterator[AsyncIterator[signal.Signals]]:
    """The daemon's signals, received from now on (open it first: a signal during start-up is kept).

    A signal that arrives while the daemon builds its wiring, binds its sockets or starts its
    sessions waits in the receiver and is acted on as soon as the lifecycle runs: a SIGTERM
    during start-up drains (nothing much to drain) and exits 0, never 143.
    """
    with anyio.open_signal_receiver(*DAEMON_SIGNALS) as received:
        yield received


async def run_daemon(
    supervisor: Supervisor,
    *,
    grace_s: float,
    services: Sequence[Service] = (),
    body: Callable[[], Awaitable[None]] | None = None,
    on_ready: Callable[[], object] | None = None,
    on_stopping: Callable[[], object] | None = None,
    on_reload: Callable[[], Awaitable[object]] | None = None,
    stop: anyio.Event | None = None,
    signals: AsyncIterator[signal.Signals] | None = None,
) -> bool:
    """Run the daemon until ``body`` returns (default: forever), a stop signal or ``stop``; then drain.

    ``signals`` is a receiver opened earlier with :func:`daemon_signals` (None: open one now).
    SIGHUP calls ``on_reload`` and the daemon goes on. Returns True when a second stop signal
    forced the exit before the drain completed.
    """
    with contextlib.ExitStack() as stack:
        if signals is None:
            signals = stack.enter_context(daemon_signals())
        return await _lifecycle(
            supervisor, grace_s, services, body, on_ready, on_stopping, on_reload, stop, signals
        )


async def _lifecycle(
    supervisor: Supervisor,
    grace_s: float,
    services: Sequence[Service],
    body: Callable[[], Awaitable[None]] | None,
    on_ready: Callable[[], object] | None,
    on_stopping: Callable[[], object] | None,
    on_reload: Callable[[], Awaitable[object]] | None,
    stop: anyio.Event | None,
    signals: AsyncIterator[signal.Signals],
) -> bool:
    forced = False
    async with anyio.create_task_group() as tg:
        await tg.start(supervisor.serve)
        for service in services:
            await tg.start(service)
        if on_ready is not None:
            on_ready()
        async with anyio.create_task_group() as running:

            async def run_body() -> None:
                await (body() if body is not None else anyio.sleep_forever())
                running.cancel_scope.cancel()

            async def on_signals() -> None:
                async for received in signals:
                    if received == signal.SIGHUP:
                        if on_reload is not None:
                            # reloads run one at a time, in the order the signals came
                            await on_reload()
                        continue
                    running.cancel_scope.cancel()
                    return

            async def stop_on_request(requested: anyio.Event) -> None:
                await requested.wait()
                running.cancel_scope.cancel()

            running.start_soon(run_body)
            running.start_soon(on_signals)
            if stop is not None:
                running.start_soon(stop_on_request, stop)
        if on_stopping is not None:
            on_stopping()
        async with anyio.create_task_group() as drain:

            async def force_on_second_signal() -> None:
                nonlocal forced
                async for received in signals:
                    if received == signal.SIGHUP:
                        continue  # no reload while draining
                    forced = True
                    drain.cancel_scope.cancel()
                    return

            drain.start_soon(force_on_second_signal)
            await supervisor.shutdown(grace_s)
            drain.cancel_scope.cancel()
        tg.cancel_scope.cancel()
    return forced
