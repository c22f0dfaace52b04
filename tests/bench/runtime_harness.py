"""Shared plumbing of the runtime benchmarks (docs/runtime.md): a simulator subprocess and a daemon config.

The simulator runs in its own process (``session-supervisor sim genesys``) so that the
daemon's CPU time and memory are measured alone; faults and stats go through its admin
HTTP API. Everything is loopback and bounded in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import httpx

from supervisor.config import Config, parse_config

REPO = Path(__file__).resolve().parents[2]


def raise_nofile(wanted: int) -> int:
    """Raise RLIMIT_NOFILE's soft limit towards ``wanted`` (children inherit it); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def rss_bytes() -> int:
    """Resident set size of this process now (Linux /proc)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found")


class SimProcess:
    """``python -m supervisor sim genesys|cxone`` in a subprocess; admin helpers over HTTP."""

    def __init__(
        self,
        *,
        seed: int = 1,
        config: dict[str, Any] | None = None,
        start_limit_s: float = 20.0,
        kind: str = "genesys",
    ) -> None:
        self._kind = kind
        self._seed = seed
        self._config = config or {}
        self._limit = start_limit_s
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-sim-")
        self._proc: subprocess.Popen[str] | None = None
        self.urls: dict[str, str] = {}

    def __enter__(self) -> SimProcess:
        path = Path(self._tmp.name) / "sim.toml"
        path.write_text(
            "".join(f"{k} = {json.dumps(v)}\n" for k, v in self._config.items()), encoding="utf-8"
        )
        cmd = [
            sys.executable,
            "-m",
            "supervisor",
            "sim",
            self._kind,
            "--seed",
            str(self._seed),
            "--config",
            str(path),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self._limit)
        if not ready:
            self.__exit__(None, None, None)
            raise RuntimeError("the simulator did not print its URLs in time")
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read() if self._proc.stderr else ""
            self.__exit__(None, None, None)
            raise RuntimeError(f"the simulator exited: {err.strip()[-500:]}")
        self.urls = json.loads(line)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        self._tmp.cleanup()

    @property
    def admin(self) -> str:
        return self.urls["admin"]

    async def inject(self, client: httpx.AsyncClient, *faults: dict[str, Any]) -> list[dict[str, Any]]:
        r = await client.post(self.admin + "/faults", json=list(faults))
        r.raise_for_status()
        out: list[dict[str, Any]] = r.json()["faults"]
        return out

    async def clear(self, client: httpx.AsyncClient) -> None:
        (await client.delete(self.admin + "/faults")).raise_for_status()

    async def reset(self, client: httpx.AsyncClient) -> None:
        (await client.post(self.admin + "/stats/reset")).raise_for_status()

    async def stats(self, client: httpx.AsyncClient) -> dict[str, Any]:
        r = await client.get(self.admin + "/stats")
        r.raise_for_status()
        out: dict[str, Any] = r.json()
        return out


_DELAY = re.compile(r"^(baseDelayMs|maxDelayMs)\s*=\s*(\d+)\s*$", re.MULTILINE)


def taxonomy_variant(
    directory: Path,
    name: str,
    *,
    jitter: str | None = None,
    delay_scale: float = 1.0,
    honor_retry_after: bool = True,
) -> str:
    """Taxonomy v2 (the default) with another jitter, scaled delays or Retry-After ignored; returns its path.

    v2, not v1: the simulator answers a resumed guest as Genesys does, without ``newSession`` and
    ``readOnly``, which v1 requires (docs/taxonomy.md): under v1 every reconnection of the storm
    ended INCOMPLETE_RESPONSE. The two route the storm's own failures (a 1006 drop, 429/503 + Retry-After
    on the upgrade) alike (``session-supervisor taxonomy diff v1 v2``).
    """
    text = (resources.files("supervisor.taxonomy") / "data" / "v2.toml").read_text(encoding="utf-8")
    if jitter is not None:
        text = re.sub(r'^jitter = "\w+"', f'jitter = "{jitter}"', text, flags=re.MULTILINE)
    if delay_scale != 1.0:
        text = _DELAY.sub(lambda m: f"{m.group(1)} = {round(int(m.group(2)) * delay_scale)}", text)
    if not honor_retry_after:
        text = re.sub(r"^honorsRetryAfter = true", "honorsRetryAfter = false", text, flags=re.MULTILINE)
    path = directory / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def webmessaging_config(
    urls: dict[str, str],
    sessions: int,
    *,
    first_delay: tuple[float, float] = (2.0, 8.0),
    taxonomy: str = "v2",
    seed: int = 1,
    echo_interval: float = 30.0,
    adaptive: bool = True,
    probe: str = "aimd",
    connects_in_flight: int | None = None,
) -> Config:
    """``sessions`` Genesys Web Messaging guests against the simulator at ``urls``."""
    data: dict[str, Any] = {
        "platforms": {
            "genesys": {
                "loginUrl": urls["login"],
                "apiUrl": urls["api"],
                "webmessagingUrl": urls["webmessaging"],
                "deploymentId": "bench-deployment",
                "keepalive": {"echoInterval": echo_interval},
            }
        },
        "sessions": [
            {"id": f"wm-{i:05d}", "platform": "genesys", "kind": "webmessaging"} for i in range(sessions)
        ],
        "daemon": {"taxonomyVersion": taxonomy, "seed": seed},
        "reconnect": {"firstDelayMin": first_delay[0], "firstDelayMax": first_delay[1]},
        "admission": {"adaptive": adaptive, "probe": probe},
    }
    if connects_in_flight is not None:
        data["admission"]["connectsInFlight"] = connects_in_flight
    return parse_config(data, "bench")


async def wait_for(condition: Callable[[], bool], limit_s: float, poll_s: float = 0.05) -> bool:
    """Poll ``condition`` (a benchmark watches a system under load); False when ``limit_s`` passed."""
    with anyio.move_on_after(limit_s):
        # polling is the point: a benchmark samples a system under load, it has no event to await
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(poll_s)
        return True
    return False


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, right-aligned numbers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 1) + ":" if i else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    body = [
        "| "
        + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        + " |"
        for r in rows
    ]
    return "\n".join([line, sep, *body])


@contextlib.asynccontextmanager
async def running_supervisor(config: Config, *, bus: Any, seed: int, clock: Any = None) -> AsyncIterator[Any]:
    """A Supervisor serving ``config`` (every session handed over), cancelled on exit: the tests'
    in-process daemon (tests/harness/in_process.py), without recording its events.

    The collector is tuned as the daemon's process tunes it (supervisor/runtime/collector.py).
    """
    from supervisor.runtime.collector import tuned_collector
    from tests.harness.in_process import supervised

    with tuned_collector():
        async with supervised(
            config, None, bus=bus, clock=clock, rng_seed=seed, drain_s=None, record=False
        ) as harness:
            yield harness.supervisor
