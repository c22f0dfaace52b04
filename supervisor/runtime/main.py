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
exit was forced). Services are callables that accept
anyio's ``task_status`` and call ``task_status.started()`` once they are usable (a socket
bound, an exporter ready); each is started in order, so readiness means all of them are.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import anyio

from supervisor.runtime.supervisor import Supervisor

__all__ = ["Service", "run_daemon"]

# a long-running task that calls ``task_status.started()`` when it is usable
Service = Callable[..., Coroutine[Any, Any, Any]]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def run_daemon(
    supervisor: Supervisor,
    *,
    grace_s: float,
    services: Sequence[Service] = (),
    body: Callable[[], Awaitable[None]] | None = None,
    on_ready: Callable[[], object] | None = None,
    on_stopping: Callable[[], object] | None = None,
    stop: anyio.Event | None = None,
) -> bool:
    """Run the daemon until ``body`` returns (default: forever) or a stop signal; then drain.

    Returns True when a second signal forced the exit before the drain completed.
    """
    forced = False
    async with anyio.create_task_group() as tg:
        await tg.start(supervisor.serve)
        for service in services:
            await tg.start(service)
        if on_ready is not None:
            on_ready()
        with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
            async with anyio.create_task_group() as running:

                async def run_body() -> None:
                    await (body() if body is not None else anyio.sleep_forever())
                    running.cancel_scope.cancel()

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        running.cancel_scope.cancel()
                        return

                async def stop_on_request(requested: anyio.Event) -> None:
                    await requested.wait()
                    running.cancel_scope.cancel()

                running.start_soon(run_body)
                running.start_soon(stop_on_signal)
                if stop is not None:
                    running.start_soon(stop_on_request, stop)
            if on_stopping is not None:
                on_stopping()
            async with anyio.create_task_group() as drain:

                async def force_on_second_signal() -> None:
                    nonlocal forced
                    async for _ in signals:
                        forced = True
                        drain.cancel_scope.cancel()
                        return

                drain.start_soon(force_on_second_signal)
                await supervisor.shutdown(grace_s)
                drain.cancel_scope.cancel()
        tg.cancel_scope.cancel()
    return forced
