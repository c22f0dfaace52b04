"""Retry-wrapper overhead on a successful async call: ours beside tenacity and stamina, one run (docs/runtime.md).

Target (docs/architecture.md, "Targets"): <= 5 us per successful call, beside tenacity (~31 us) and stamina (~24 us).

Ours is measured three ways, all the real code (the one retry executor):

* ``ours: executor, no hooks`` -- ``RetryExecutor.call`` around a trivial coroutine: circuit
  lookup and ``admit()``, the call, the outcome check, ``record_success()``, the loop (no token
  cache, as for an unauthenticated call; a retry never happens);
* ``ours: executor, no-op hook`` -- the same with a hook object whose ``operation``/``attempt``
  scopes are None and whose notifications do nothing: the cost of the span-ready seam itself
  (the details objects it is handed);
* ``ours: RequestPipeline.request`` -- the HTTP entry point around an ``httpx.MockTransport``
  request (no hooks), minus the same request made directly on the same client.

tenacity and stamina wrap the trivial coroutine with 3 attempts and exponential jitter,
their documented defaults otherwise.

The library's public facade (docs/library.md) is measured the same way on an HTTP call:
``httpx.AsyncClient`` and ``httpx.Client`` over ``ResilientTransport`` (an ``httpx.MockTransport``
inner) against the same client without it, and tenacity and stamina wrapping the same call as their
docs' HTTP examples configure them (3 attempts, exponential jitter, ``raise_for_status()`` inside).

Every group of rows (the wrappers around the trivial coroutine; the HTTP entry point; the facade's
async rows: bare httpx, ours, tenacity, stamina; its sync rows) is measured in interleaved rounds
(:func:`interleaved`): each round times every row of the group once over ``--calls`` calls, in an order
rotated round by round, so a change of the shared machine's load weighs on every row of a round alike.
Figures are medians over the rounds (``--rounds``): us per call, and the overhead as the median of the
differences to the bare row *of the same round* (paired), with its quartiles (the noise left), and its
ratio to ours.

Then a 429 storm against the Genesys simulator over loopback
(:func:`storm`): 20 callers at once, every answer a 429 with ``Retry-After: 1`` for 3 s; requests sent
while a Retry-After the platform gave was still running, requests per success, time to drain; ours,
and tenacity and stamina as their docs configure them, then with the Retry-After handling their docs show.

    .venv/bin/python tests/bench/bench_wrapper.py [--calls 5000] [--rounds 21] [--no-storm]
    .venv/bin/python -m pytest tests/bench/bench_wrapper.py -m bench -o addopts="" -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

import anyio
import httpx
import pytest
import stamina
import tenacity

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from machines.registry import CircuitRegistry, Endpoints
from supervisor.attempts import Attempts
from supervisor.boundary import SessionContext
from supervisor.clock import SystemClock
from supervisor.http import ResilientTransport
from supervisor.rest.executor import RetryExecutor
from supervisor.rest.hooks import NoHooks
from supervisor.rest.pipeline import RequestPipeline
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.taxonomy import Channel, Classifier, Platform, load_taxonomy
from supervisor.vocabulary import EndpointId

TARGET_US = 5.0
#: rounds of interleaved measurement: each round times every contender of a group once, in an order rotated
#: round by round (none always first); a figure is the median over the rounds
ROUNDS = 21
#: calls per contender and round (the HTTP rows a tenth of it)
CALLS = 5_000
Call = Callable[[], Awaitable[object]]


class Contender(NamedTuple):
    """One row: its call, and the row its overhead is measured from (None: it is a bare row)."""

    name: str
    base: str | None
    call: Call | Callable[[], object]
    sync: bool = False


class Figure(NamedTuple):
    """A row's medians over the rounds, in microseconds per call; the overhead is the median of the paired
    differences (the row minus its bare row *in the same round*), with its quartiles: the noise left."""

    us: float
    overhead: float
    overhead_q1: float
    overhead_q3: float


async def op() -> int:
    return 1


async def interleaved(contenders: list[Contender], calls: int, rounds: int) -> dict[str, Figure]:
    """Every contender timed once per round over ``calls`` calls, the order rotated each round: a drift in the
    machine's load (a shared machine) weighs on every row of a round alike, and the paired differences cancel it."""
    times: dict[str, list[float]] = {c.name: [] for c in contenders}
    for round_no in range(rounds):
        shift = round_no % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            call = contender.call
            start = time.perf_counter_ns()
            if contender.sync:
                for _ in range(calls):
                    call()
            else:
                for _ in range(calls):
                    await call()  # type: ignore[misc]
            times[contender.name].append((time.perf_counter_ns() - start) / calls / 1000.0)
    out: dict[str, Figure] = {}
    for c in contenders:
        mine = times[c.name]
        paired = [t - b for t, b in zip(mine, times[c.base], strict=True)] if c.base is not None else [0.0]
        q1, _median, q3 = statistics.quantiles(paired, n=4) if len(paired) > 1 else (paired[0],) * 3
        out[c.name] = Figure(statistics.median(mine), statistics.median(paired), q1, q3)
    return out


def ours_call(executor: RetryExecutor) -> Call:
    ctx = SessionContext("bench", Platform.GENESYS, Channel.REST)

    async def once(token: object) -> int:
        return await op()

    async def call() -> object:
        return await executor.call(
            once, ctx=ctx, circuit=EndpointId(Platform.GENESYS, "bench"), operation="bench"
        )

    return call


def tenacity_call() -> Call:
    @tenacity.retry(
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_exponential_jitter(initial=1, max=16),
        retry=tenacity.retry_if_exception_type(Exception),
        reraise=True,
    )
    async def call() -> object:
        return await op()

    return call


def stamina_call() -> Call:
    @stamina.retry(on=Exception, attempts=3)
    async def call() -> object:
        return await op()

    return call


async def measure(calls: int, rounds: int = ROUNDS) -> dict[str, Figure]:
    clock = SystemClock()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": True}))
    classifier = Classifier(load_taxonomy("v1"), clock)
    async with httpx.AsyncClient(transport=transport) as client:
        executor = RetryExecutor(classifier, Attempts(Endpoints(clock, CircuitRegistry(clock))), clock)
        hooked = RetryExecutor(
            classifier, Attempts(Endpoints(clock, CircuitRegistry(clock))), clock, hooks=NoHooks()
        )
        pipeline = RequestPipeline(client, executor)
        out = await interleaved(
            [
                Contender("bare", None, op),
                Contender("ours: executor, no hooks", "bare", ours_call(executor)),
                Contender("ours: executor, no-op hook", "bare", ours_call(hooked)),
                Contender("tenacity", "bare", tenacity_call()),
                Contender("stamina", "bare", stamina_call()),
            ],
            calls,
            rounds,
        )
        # the HTTP entry point around an in-memory httpx transport, minus the bare request
        ctx = SessionContext("bench", Platform.GENESYS, Channel.REST)
        url = "http://sim.invalid/api/v2/conversations/c1"

        async def direct() -> object:
            return await client.request("GET", url)

        async def piped() -> object:
            return await pipeline.request("GET", url, ctx=ctx, circuit=EndpointId.api(Platform.GENESYS))

        http_calls = max(1, calls // 10)
        out.update(
            await interleaved(
                [
                    Contender("httpx request (bare)", None, direct),
                    Contender("ours: RequestPipeline.request", "httpx request (bare)", piped),
                ],
                http_calls,
                rounds,
            )
        )
    out.update(await facade(http_calls, rounds))
    return out


# -- the public facade: an HTTP call through ResilientTransport, tenacity, stamina -------------------

FACADE_URL = "http://api.invalid/api/v2/users/2f8a3b9e-0000-4000-8000-000000000001"
#: the facade's bare rows, each with our row over it (the ratio column divides each row's overhead by ours)
FACADE_OURS = {
    "httpx AsyncClient (bare)": "ours: ResilientTransport (AsyncClient)",
    "httpx Client (bare)": "ours: ResilientTransport (Client)",
    "inner transport (bare)": "ours: ResilientTransport.handle_request",
}


def _ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={"ok": True})


async def facade(calls: int, rounds: int = ROUNDS) -> dict[str, Figure]:
    """The facade's rows in interleaved rounds: bare httpx, ours, tenacity and stamina around the same
    AsyncClient call, each round all four (then the sync rows, likewise)."""
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(_ok)) as bare,
        httpx.AsyncClient(
            transport=ResilientTransport("genesys", transport=httpx.MockTransport(_ok))
        ) as ours,
    ):

        async def plain() -> object:
            return await bare.get(FACADE_URL)

        async def resilient() -> object:
            return await ours.get(FACADE_URL)

        # tenacity's docs: retry=..., stop=stop_after_attempt(3), wait=wait_exponential_jitter(); the call
        # raises for a status, as their HTTP examples do
        @tenacity.retry(
            stop=tenacity.stop_after_attempt(3),
            wait=tenacity.wait_exponential_jitter(),
            retry=tenacity.retry_if_exception_type(httpx.HTTPError),
            reraise=True,
        )
        async def with_tenacity() -> object:
            response = await bare.get(FACADE_URL)
            response.raise_for_status()
            return response

        # stamina's docs: @stamina.retry(on=httpx.HTTPError, attempts=3) around a call that raises for a status
        @stamina.retry(on=httpx.HTTPError, attempts=3)
        async def with_stamina() -> object:
            response = await bare.get(FACADE_URL)
            response.raise_for_status()
            return response

        base = "httpx AsyncClient (bare)"
        out = await interleaved(
            [
                Contender(base, None, plain),
                Contender(FACADE_OURS[base], base, resilient),
                Contender("tenacity around httpx (AsyncClient)", base, with_tenacity),
                Contender("stamina around httpx (AsyncClient)", base, with_stamina),
            ],
            calls,
            rounds,
        )
    with (
        httpx.Client(transport=httpx.MockTransport(_ok)) as sync_bare,
        httpx.Client(
            transport=ResilientTransport("genesys", transport=httpx.MockTransport(_ok))
        ) as sync_ours,
    ):
        # the transport alone: ResilientTransport.handle_request around an inner that answers at once
        request = httpx.Request("GET", FACADE_URL)
        answer = httpx.Response(200)

        class Inner(httpx.BaseTransport):
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                return answer

        inner = Inner()
        alone = ResilientTransport("genesys", transport=inner)
        client_base, inner_base = "httpx Client (bare)", "inner transport (bare)"
        out.update(
            await interleaved(
                [
                    Contender(client_base, None, lambda: sync_bare.get(FACADE_URL), sync=True),
                    Contender(
                        FACADE_OURS[client_base], client_base, lambda: sync_ours.get(FACADE_URL), sync=True
                    ),
                    Contender(inner_base, None, lambda: inner.handle_request(request), sync=True),
                    Contender(
                        FACADE_OURS[inner_base], inner_base, lambda: alone.handle_request(request), sync=True
                    ),
                ],
                calls,
                rounds,
            )
        )
    return out


FACADE_ROWS = {
    "httpx AsyncClient (bare)": (
        "ours: ResilientTransport (AsyncClient)",
        "tenacity around httpx (AsyncClient)",
        "stamina around httpx (AsyncClient)",
    ),
    "httpx Client (bare)": ("ours: ResilientTransport (Client)",),
    "inner transport (bare)": ("ours: ResilientTransport.handle_request",),
}


def _table(figures: dict[str, Figure], groups: dict[str, tuple[str, ...]], ours: dict[str, str]) -> list[str]:
    lines = [
        "| call | us/call | overhead, us | overhead IQR, us | overhead / ours |",
        "|---|---:|---:|---:|---:|",
    ]
    for bare, rows in groups.items():
        lines.append(f"| {bare} | {figures[bare].us:.2f} | 0.00 | | |")
        mine = figures[ours[bare]].overhead
        for name in rows:
            f = figures[name]
            ratio = f"{f.overhead / mine:.1f}" if mine > 0 else "n/a (ours within noise)"
            lines.append(
                f"| {name} | {f.us:.2f} | {f.overhead:.2f} | {f.overhead_q1:.2f} to {f.overhead_q3:.2f} | {ratio} |"
            )
    return lines


def facade_report(figures: dict[str, Figure], rounds: int = ROUNDS) -> str:
    return "\n".join(
        [
            "an HTTP call through the public facade (httpx.MockTransport inner); us per call, medians of "
            f"{rounds} interleaved rounds (overhead: paired with the bare row of the same round)",
            *_table(figures, FACADE_ROWS, FACADE_OURS),
        ]
    )


# -- a 429 storm against the simulator -----------------------------------------------------------

STORM_CALLERS = 20
STORM_S = 3.0
STORM_RETRY_AFTER = "1"


class Wire(httpx.AsyncBaseTransport):
    """The loopback transport, recording each request's departure and each 429's Retry-After window."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.sent = 0
        self.early = 0  # sent while a Retry-After the platform gave was still running
        self._held_until = 0.0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        now = time.monotonic()
        self.sent += 1
        if now < self._held_until:
            self.early += 1
        response = await self._inner.handle_async_request(request)
        after = response.headers.get("retry-after")
        if response.status_code == 429 and after is not None and after.isdigit():
            self._held_until = max(self._held_until, time.monotonic() + int(after))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _retry_after_s(exc: BaseException) -> float | None:
    """The Retry-After of a 429, as tenacity's and stamina's docs read it."""
    if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 429:
        return float(exc.response.headers.get("Retry-After", "1"))
    return None


def storm_callers(kind: str, client: httpx.AsyncClient, url: str) -> Callable[[], Awaitable[bool]]:
    """One caller's call: True when it ended in a success."""

    async def get() -> httpx.Response:
        response = await client.get(url)
        response.raise_for_status()
        return response

    if kind == "ours":

        async def ours() -> bool:
            try:
                response = await client.get(url)
            except Exception:
                return False
            return response.status_code < 400

        return ours
    if kind.startswith("tenacity"):
        wait: tenacity.wait.wait_base = tenacity.wait_exponential_jitter()
        if "Retry-After" in kind:
            # tenacity's docs (wait_exception): the 429's Retry-After, else 60 s
            wait = tenacity.wait_exception(lambda exc: _retry_after_s(exc) or 60.0)
        wrapped = tenacity.retry(
            stop=tenacity.stop_after_attempt(3),
            wait=wait,
            retry=tenacity.retry_if_exception_type(httpx.HTTPError),
            reraise=True,
        )(get)
    else:
        on: object = httpx.HTTPError
        if "Retry-After" in kind:
            # stamina's docs: a backoff hook returning the Retry-After overrides the backoff
            def on_error(exc: Exception) -> bool | float:
                after = _retry_after_s(exc)
                return after if after is not None else isinstance(exc, httpx.HTTPError)

            on = on_error
        wrapped = stamina.retry(on=on, attempts=3)(get)  # type: ignore[arg-type]

    async def theirs() -> bool:
        try:
            await wrapped()
        except httpx.HTTPError:
            return False
        return True

    return theirs


STORM_KINDS = (
    "ours",
    "tenacity (docs: exponential jitter)",
    "stamina (docs: exponential jitter)",
    "tenacity (docs: Retry-After)",
    "stamina (docs: Retry-After)",
)


async def storm(kind: str) -> dict[str, float]:
    async with GenesysSimulator(seed=1) as sim:
        conversation = sim.create_conversation(agent_user_id="agent-1")
        async with httpx.AsyncClient() as login_client:
            login = await login_client.post(
                sim.urls["login"] + "/oauth/token", data={"grant_type": "client_credentials"}, auth=("c", "s")
            )
        token = login.json()["access_token"]
        wire = Wire()
        inner: httpx.AsyncBaseTransport = wire
        if kind == "ours":
            inner = ResilientTransport("genesys", transport=wire)
        url = sim.urls["api"] + f"/api/v2/conversations/{conversation.id}"
        async with httpx.AsyncClient(transport=inner, headers={"Authorization": f"Bearer {token}"}) as client:
            call = storm_callers(kind, client, url)
            sim.faults.inject(
                Fault(
                    kind=FaultKind.RATE_LIMIT_STORM,
                    duration_s=STORM_S,
                    endpoint="/api/v2/conversations/",
                    params={"retry_after": STORM_RETRY_AFTER},
                )
            )
            results: list[bool] = []
            started = time.monotonic()

            async def one() -> None:
                results.append(await call())

            async with anyio.create_task_group() as group:
                for _ in range(STORM_CALLERS):
                    group.start_soon(one)
            drained = time.monotonic() - started
    successes = sum(results)
    return {
        "sent": wire.sent,
        "early": wire.early,
        "successes": successes,
        "per_success": wire.sent / successes if successes else float("inf"),
        "drain_s": drained,
    }


def storm_report(rows: dict[str, dict[str, float]]) -> str:
    lines = [
        f"a 429 storm against the Genesys simulator: {STORM_CALLERS} callers at once, every answer 429 "
        f"(Retry-After: {STORM_RETRY_AFTER}) for {STORM_S:.0f} s, loopback",
        "| wrapper | requests | earlier than Retry-After | successes | requests per success | time to drain, s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, row in rows.items():
        lines.append(
            f"| {kind} | {row['sent']:.0f} | {row['early']:.0f} | {row['successes']:.0f}/{STORM_CALLERS} "
            f"| {row['per_success']:.2f} | {row['drain_s']:.1f} |"
        )
    return "\n".join(lines)


async def storms() -> dict[str, dict[str, float]]:
    return {kind: await storm(kind) for kind in STORM_KINDS}


EXECUTOR_ROWS = {
    "bare": ("ours: executor, no hooks", "ours: executor, no-op hook", "tenacity", "stamina"),
    "httpx request (bare)": ("ours: RequestPipeline.request",),
}
EXECUTOR_OURS = {"bare": "ours: executor, no hooks", "httpx request (bare)": "ours: RequestPipeline.request"}


def report(figures: dict[str, Figure], rounds: int = ROUNDS) -> str:
    versions = (
        f"tenacity {importlib.metadata.version('tenacity')}, stamina {importlib.metadata.version('stamina')}"
    )
    return "\n".join(
        [
            f"retry wrapper on a successful async call ({versions}); us per call, medians of {rounds} "
            "interleaved rounds (overhead: paired with the bare row of the same round)",
            *_table(figures, EXECUTOR_ROWS, EXECUTOR_OURS),
            f"target: ours <= {TARGET_US:.0f} us overhead",
        ]
    )


def overheads(figures: dict[str, Figure]) -> tuple[float, float]:
    return (
        max(figures["ours: executor, no hooks"].overhead, figures["ours: executor, no-op hook"].overhead),
        figures["ours: RequestPipeline.request"].overhead,
    )


@pytest.mark.bench
def test_wrapper_overhead() -> None:
    figures = anyio.run(measure, CALLS, backend="asyncio")
    print(report(figures))
    print(facade_report(figures))
    rows = anyio.run(storms, backend="asyncio")
    print(storm_report(rows))
    assert rows["ours"]["early"] == 0  # never earlier than a Retry-After
    wrapper, _http = overheads(figures)
    # the target is the retry+circuit wrapper's; the HTTP entry point's extra is reported (it
    # sits within the +-1 us noise of an ~80 us MockTransport request)
    assert wrapper <= TARGET_US


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="retry wrapper overhead")
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per contender and round")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help="interleaved rounds (the median is reported)"
    )
    parser.add_argument("--no-storm", action="store_true", help="skip the 429 storm against the simulator")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds must be at least 1")
    figures = anyio.run(measure, args.calls, args.rounds, backend="asyncio")
    print(report(figures, args.rounds))
    print(facade_report(figures, args.rounds))
    early = 0.0
    if not args.no_storm:
        rows = anyio.run(storms, backend="asyncio")
        print(storm_report(rows))
        early = rows["ours"]["early"]
    wrapper, _http = overheads(figures)
    return 0 if wrapper <= TARGET_US and early == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
