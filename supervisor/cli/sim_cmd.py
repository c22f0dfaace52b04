"""``session-supervisor sim genesys|cxone``: run a loopback simulator in the foreground (docs/simulators.md).

The first stdout line is one JSON object with the base URLs bound, keyed
``login, api, webmessaging, streaming, admin`` (Genesys) or ``auth, api, admin`` (CXone); the
process then serves until SIGTERM, SIGINT or SIGHUP. ``--port 0`` (default) picks free ports;
``--port P`` binds P, P+1, ... in key order. By default any client id, secret, user and
deployment id is accepted; ``--config FILE`` (TOML, the simulator config's keys) restricts them.
"""

from __future__ import annotations

import json
import signal
import sys
import tomllib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio
import click
import msgspec

from supervisor.errors import SimulatorError
from supervisor.taxonomy.loader import LimitError, parse_toml, read_capped

#: the largest simulator config file read
MAX_SIM_CONFIG_BYTES = 1024 * 1024
#: the longest token lifetime, seconds (about 31 years: any more overflows the simulators' clocks)
MAX_TOKEN_TTL_S = 10**9


class _Simulator(Protocol):
    urls: dict[str, str]


def _read_toml(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        # one bounded read: /dev/zero or a FIFO fed forever is an error, not a hang
        return parse_toml(read_capped(path, MAX_SIM_CONFIG_BYTES).decode("utf-8"))
    except OSError as exc:
        raise click.BadParameter(
            f"{path}: cannot read: {exc.strerror or exc}", param_hint="--config"
        ) from None
    except LimitError as exc:
        raise click.BadParameter(f"{path}: {exc}", param_hint="--config") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"{path}: invalid TOML: {exc}", param_hint="--config") from None


def _convert(data: dict[str, Any], cls: type[Any], source: str) -> Any:
    """``cls`` from TOML data; a bad key is a usage error naming it (exit 2)."""
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        text, sep, where = str(exc).rpartition(" - at `")
        key = where.rstrip("`").removeprefix("$.").removeprefix("$") if sep else ""
        raise click.BadParameter(
            f"{source}: {key or '(top level)'}: {text or exc}", param_hint="--config"
        ) from None
    except (ValueError, TypeError) as exc:
        raise click.BadParameter(f"{source}: {exc}", param_hint="--config") from None


class _OutputError(Exception):
    """The ready line could not be written (stdout full, read-only or closed)."""


#: what stops a simulator: SIGTERM, SIGINT, and SIGHUP (the terminal it ran in went away)
SIM_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run_simulator(factory: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
    """Start the simulator, print its URLs as one JSON line, serve until SIGTERM, SIGINT or SIGHUP.

    The signals come from the process's record (supervisor/runtime/signals.py): one that arrived
    before the URLs were printed (during the imports, while binding) stops the simulator there,
    with one line and exit 0, never a default action's 143 or a traceback.
    """
    from supervisor.runtime.collector import tuned_collector
    from supervisor.runtime.signals import receiving
    from supervisor.sim.loop_stalls import LoopStalls

    async def main() -> signal.Signals | None:
        """None once it served and was stopped; the signal that stopped it before it served."""
        with receiving() as signals:
            early = signals.take_stop(SIM_STOPS)
            if early is not None:
                return early
            async with factory() as sim:
                early = signals.take_stop(SIM_STOPS)
                if early is not None:
                    return early
                try:
                    sys.stdout.write(json.dumps(sim.urls) + "\n")
                    sys.stdout.flush()
                except OSError as exc:
                    # nobody can learn the URLs: stop rather than serve blind (raised outside the
                    # task group below, so that it stays one error, not an exception group)
                    raise _OutputError(exc.strerror or str(exc)) from None
                # the judge keeps its own stalls (supervisor/sim/loop_stalls.py): a second it
                # stalled in says as much about it as about its client
                stalls = sim.recorder.loop_stalls = LoopStalls()
                async with anyio.create_task_group() as watching:
                    watching.start_soon(stalls.watch)
                    async for received in signals:
                        if received in SIM_STOPS:
                            break
                    watching.cancel_scope.cancel()
        return None

    try:
        # this process holds thousands of sessions too: collected as the daemon's is, in fewer,
        # larger collections, not a full one every few seconds stalling every handshake
        with tuned_collector():
            early = anyio.run(main, backend="asyncio")
    except _OutputError as exc:
        raise click.ClickException(f"cannot write to standard output: {exc}") from None
    except OSError as exc:  # e.g. a port taken between checks
        raise SimulatorError(f"cannot serve: {exc.strerror or exc}") from None
    if early is not None:
        click.echo(f"session-supervisor: sim: {early.name} before it served: stopped", err=True)


_common = [
    click.option(
        "--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default)."
    ),
    click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=0,
        show_default=True,
        help="First port; listeners bind P, P+1, ... in key order. 0 = free ports.",
    ),
    click.option(
        "--seed", type=int, default=0, show_default=True, help="Seed of ids, tokens and fault shares."
    ),
    click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        help="TOML file with the simulator's config keys (restrict clients, set TTLs, ...).",
    ),
    click.option(
        "--token-ttl",
        type=click.IntRange(min=1, max=MAX_TOKEN_TTL_S),
        default=None,
        help="Access token lifetime, seconds.",
    ),
]


def _options(func: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_common):
        func = option(func)
    return func


@click.group()
def sim() -> None:
    """Run a loopback simulator of Genesys Cloud or NICE CXone in the foreground.

    The first stdout line is a JSON object of the base URLs bound. Faults and stats:
    the "admin" URL (POST /faults, GET /stats; see docs/simulators.md).
    """


@sim.command("genesys")
@_options
def genesys(host: str, port: int, seed: int, config_path: str | None, token_ttl: int | None) -> None:
    """Genesys Cloud: URLs keyed login, api, webmessaging, streaming, admin."""
    from supervisor.sim.genesys import GenesysSimulator
    from supervisor.sim.genesys.config import GenesysSimConfig

    data = _read_toml(config_path)
    if token_ttl is not None:
        data["token_ttl_s"] = token_ttl
    config = _convert(data, GenesysSimConfig, config_path or "--token-ttl")
    run_simulator(lambda: GenesysSimulator(config, host=host, port=port, seed=seed))


@sim.command("cxone")
@_options
def cxone(host: str, port: int, seed: int, config_path: str | None, token_ttl: int | None) -> None:
    """NICE CXone: URLs keyed auth, api, admin (any v{N}.0 API version is accepted)."""
    from supervisor.sim.cxone import CxoneSimConfig, CxoneSimulator

    data = _read_toml(config_path)
    if token_ttl is not None:
        data["token_ttl_s"] = token_ttl
    config = _convert(data, CxoneSimConfig, config_path or "--token-ttl")
    run_simulator(lambda: CxoneSimulator(config, host=host, port=port, seed=seed))
