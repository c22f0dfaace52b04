"""The one lifecycle of the daemon, used by ``run`` and ``demo`` alike.

Structured concurrency from one root task group (anyio; uvicorn's phases)::

    binding.bind() ...                    # the sockets, in order, before any session starts
    await tg.start(supervisor.serve)      # every configured session handed over
    await tg.start(service) ...           # the socket API, telemetry, the watchdog, ...
    on_ready()                            # the readiness moment: READY=1 hooks in here
    await body()                          # `run`: until a signal or a stop request; `demo`: the scenario
    on_stopping(); supervisor.shutdown()  # drain: close every session with 1001, bounded
    await on_drained()                    # a fleet member: its shards freed for its peers
    tg.cancel_scope.cancel()
    binding.close() ...                   # whatever happened: the listeners closed, our files removed

SIGTERM or SIGINT ends ``body`` early and starts the drain, as does setting ``stop`` (the control
socket's ``drain`` verb); a second signal during the drain cancels it at once (the result says the
exit was forced). SIGHUP reloads the configuration (``on_reload``) and the daemon goes on.

The signals come from the process's record (supervisor/runtime/signals.py), installed by the entry
point before anything is imported and kept until the process exits, so no moment is left to a
default action (143, 129, a ``KeyboardInterrupt``). A stop signal recorded before the readiness
moment (during the imports, the configuration's reading, the start) ends the start there: no
``on_ready`` (no READY=1), the drain at once for whatever was started. SIGHUPs recorded before it
are one reload once the daemon serves. Services are callables that accept anyio's ``task_status``
and call ``task_status.started()`` once they are usable (a socket bound, an exporter ready); each
is started in order, so readiness means all of them are. Bindings (the socket API) are bound in
order before the supervisor starts any session: one that cannot bind (a path held by a live daemon)
raises and ends the start there, with nothing started; each bound one is closed when the lifecycle
ends, however it ends. supervisor/runtime/assembly.py builds what goes in here.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio

from supervisor.runtime.signals import HANDLED, SignalReceiver, receiving
from supervisor.runtime.supervisor import Supervisor

__all__ = ["DAEMON_SIGNALS", "Binding", "Service", "daemon_signals", "run_daemon"]

# a long-running task that calls ``task_status.started()`` when it is usable
Service = Callable[..., Coroutine[Any, Any, Any]]


class Binding(Protocol):
    """What the lifecycle binds before any session starts (the socket API's two sockets)."""

    def bind(self) -> None:
        """Bind now; raises (ConfigError naming the path) to end the start."""

    def close(self) -> None:
        """Close what :meth:`bind` opened, if still open (idempotent)."""


#: SIGTERM/SIGINT stop (drain); SIGHUP reloads the configuration (systemd's ExecReload convention)
DAEMON_SIGNALS = HANDLED


def daemon_signals() -> contextlib.AbstractContextManager[SignalReceiver]:
    """The daemon's signals on the event loop: the process's record, what it holds already included.

    Open it as the loop starts: a signal recorded while the daemon builds its wiring, binds its
    sockets or starts its sessions is acted on as soon as the lifecycle runs (a stop before the
    readiness moment: the drain at once, exit 0), never by a default action.
    """
    return receiving()


async def run_daemon(
    supervisor: Supervisor,
    *,
    grace_s: float,
    bind: Sequence[Binding] = (),
    services: Sequence[Service] = (),
    body: Callable[[], Awaitable[None]] | None = None,
    on_ready: Callable[[], object] | None = None,
    on_stopping: Callable[[], object] | None = None,
    on_reload: Callable[[], Awaitable[object]] | None = None,
    stop: anyio.Event | None = None,
    signals: SignalReceiver | None = None,
    on_drained: Callable[[], Awaitable[object]] | None = None,
) -> bool:
    """Run the daemon until ``body`` returns (default: forever), a stop signal or ``stop``; then drain.

    ``signals`` is a receiver opened earlier with :func:`daemon_signals` (None: open one now).
    SIGHUP calls ``on_reload`` and the daemon goes on. Returns True when a second stop signal
    forced the exit before the drain completed. A stop signal already recorded at the readiness
    moment skips ``on_ready`` and ``body``: the drain starts at once. ``bind`` is bound in order
    before any session starts, and closed when the lifecycle ends. ``on_drained`` is awaited once the
    drain is over, before the services stop (a fleet member frees its shards there: its peers take
    them over while this process is still winding down).
    """
    with contextlib.ExitStack() as stack:
        if signals is None:
            signals = stack.enter_context(daemon_signals())
        for binding in bind:
            # bound before any session starts: a path held by a live daemon ends the start here
            binding.bind()
            stack.callback(binding.close)
        return await _lifecycle(
            supervisor, grace_s, services, body, on_ready, on_stopping, on_reload, stop, signals, on_drained
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
    signals: SignalReceiver,
    on_drained: Callable[[], Awaitable[object]] | None = None,
) -> bool:
    forced = False
    async with anyio.create_task_group() as tg:
        await tg.start(supervisor.serve)
        for service in services:
            await tg.start(service)
        # stopped during start-up (even before the loop ran): never ready, drain what was started
        stopped_early = signals.take_stop() is not None
        if on_ready is not None and not stopped_early:
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

            if not stopped_early:
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
            if on_drained is not None:
                await on_drained()
            drain.cancel_scope.cancel()
        tg.cancel_scope.cancel()
    return forced
