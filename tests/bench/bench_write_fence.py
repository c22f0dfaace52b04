"""The write fence's cost per write (docs/runtime.md, "The fence at the write").

Run: ``./dev bench -k write_fence`` or ``.venv/bin/python tests/bench/bench_write_fence.py``.

Measured: a shard guard's ``check`` alone (a dictionary lookup, one ``clock_gettime(CLOCK_BOOTTIME)``,
a comparison), a channel's guard over three shards, and a 200-byte write on a real loopback TCP
connection through asyncio's transport, bare and through :class:`FencedTransport` (the peer reads
everything). One host (SoloLeases) has no fence and pays none of it.
Target (ours): the check adds ≤ 1 µs to a write.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import time
from collections.abc import Callable

import pytest

from supervisor.runtime.fence import WriteFence, boottime
from supervisor.runtime.leases import Lease
from supervisor.transports.fenced_io import FencedTransport

ROUNDS = 7
WRITES = 20_000
CHUNK = b"x" * 200


def _per_call_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    results = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        results.append((time.perf_counter() - start) / calls * 1e6)
    return min(results), statistics.median(results)


class _Sink(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        pass


async def _writes_us(fenced: bool, fence: WriteFence) -> tuple[float, float]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Sink, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
    transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out: asyncio.Transport = FencedTransport(transport, fence.guard(3)) if fenced else transport
    results = []
    try:
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for i in range(WRITES):
                out.write(CHUNK)
                if i % 64 == 0:
                    await asyncio.sleep(0)  # let the peer read: the kernel's buffer never fills
            results.append((time.perf_counter() - start) / WRITES * 1e6)
            await asyncio.sleep(0.05)
    finally:
        transport.close()
        server.close()
    return min(results), statistics.median(results)


def measure() -> dict[str, tuple[float, float]]:
    fence = WriteFence(now=boottime)
    now = boottime()
    fence.follow({s: Lease(s, 1, now + 3600.0) for s in (3, 7, 200)})
    shard, channel = fence.guard(3), fence.earliest(lambda: (3, 7, 200))
    out = {
        "clock_gettime(CLOCK_BOOTTIME)": _per_call_us(boottime, 200_000),
        "shard guard check": _per_call_us(shard.check, 200_000),
        "channel guard check (3 shards)": _per_call_us(channel.check, 200_000),
    }
    out["200-byte loopback write, bare transport"] = asyncio.run(_writes_us(False, fence))
    out["200-byte loopback write, FencedTransport"] = asyncio.run(_writes_us(True, fence))
    return out


@pytest.mark.bench
def test_write_fence_costs() -> None:
    results = measure()
    report(results)
    assert results["shard guard check"][0] <= 1.0


def report(results: dict[str, tuple[float, float]]) -> None:
    print()
    print(f"{'measurement':44} {'best µs':>9} {'median µs':>10}")
    for name, (best, median) in results.items():
        print(f"{name:44} {best:9.3f} {median:10.3f}")


if __name__ == "__main__":
    report(measure())
