"""The protocol decision, measured (docs/socket-api.md): our plain varlink framing against the ``asyncvarlink`` package.

Both serve ``org.varlink.service.GetInfo`` on a Unix socket from their own process (ours: the
control socket of ``SocketApi``; asyncvarlink 0.3: its ``VarlinkServiceInterface``), and the
same blocking client measures, per implementation:

* a call's round trip, 5,000 calls one after the other (µs per call);
* 10,000 calls pipelined on one connection (ms for all replies);
* what a hostile client costs the server: 16 MiB without a NUL (does the server stop reading,
  how much does its RSS grow), a 32,000-deep JSON array (under 64 KiB), a message that is not UTF-8, and
  whether the server still answers a new client afterwards.

asyncvarlink is optional (``pip install asyncvarlink``, in the ``bench`` extra); without it only
our figures are printed.

    .venv/bin/python tests/bench/bench_socket_protocol.py
"""

from __future__ import annotations

import argparse
import importlib.util
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from supervisor.api.protocol import Method, encode_call

GET_INFO = encode_call(Method.GET_INFO)


# -- the servers (each in its own process) ------------------------------------------------------------


def serve_ours(path: str) -> None:
    import anyio

    from supervisor.bus import EventBus
    from supervisor.config import SocketsConfig, parse_config
    from supervisor.runtime.assembly import socket_api
    from supervisor.runtime.supervisor import Supervisor
    from supervisor.runtime.wiring import Wiring

    config = parse_config(
        '[platforms.genesys]\nloginUrl = "http://x:1"\napiUrl = "http://x:1"\n', "bench.toml"
    )

    async def main() -> None:
        async with Wiring(config, bus=EventBus(), environ={}) as wiring:
            api = socket_api(
                Supervisor(wiring), SocketsConfig(), environ={}, paths=(Path(path + ".s"), Path(path))
            )
            async with anyio.create_task_group() as tg:
                await tg.start(api.serve)
                print("ready", flush=True)

    anyio.run(main, backend="asyncio")


def serve_asyncvarlink(path: str) -> None:
    import asyncio

    from asyncvarlink import VarlinkInterfaceRegistry, create_unix_server
    from asyncvarlink.serviceinterface import VarlinkServiceInterface

    async def main() -> None:
        registry = VarlinkInterfaceRegistry()
        registry.register_interface(
            VarlinkServiceInterface("bench", "bench", "1", "https://example.invalid", registry)
        )
        await create_unix_server(registry.protocol_factory, path)
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


# -- the client ---------------------------------------------------------------------------------------


def connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(path)
    return sock


def read_replies(sock: socket.socket, count: int) -> list[bytes]:
    replies: list[bytes] = []
    buffer = b""
    while len(replies) < count:
        data = sock.recv(1 << 16)
        if not data:
            break
        *frames, buffer = (buffer + data).split(b"\0")
        replies.extend(frames)
    return replies


def round_trips(path: str, n: int = 5000) -> float:
    sock = connect(path)
    begin = time.perf_counter()
    for _ in range(n):
        sock.sendall(GET_INFO)
        assert len(read_replies(sock, 1)) == 1
    elapsed = time.perf_counter() - begin
    sock.close()
    return elapsed / n * 1e6


def pipelined(path: str, n: int = 10_000) -> float:
    sock = connect(path)
    begin = time.perf_counter()
    writer = threading.Thread(target=sock.sendall, args=(GET_INFO * n,))
    writer.start()
    replies = read_replies(sock, n)
    writer.join()
    elapsed = time.perf_counter() - begin
    sock.close()
    assert len(replies) == n
    return elapsed * 1e3


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def oversized(path: str, pid: int, size: int = 16 << 20) -> str:
    before = rss_kib(pid)
    sock = connect(path)
    sent = 0
    chunk = b"x" * 65536
    closed = False
    try:
        while sent < size:
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        closed = True
    time.sleep(0.5)  # let the server take in what was sent before its RSS is read (a benchmark, not a test)
    grown = (rss_kib(pid) - before) / 1024
    reply = b""
    try:
        sock.settimeout(2)
        reply = sock.recv(4096)
    except OSError:
        pass
    sock.close()
    what = "closed the connection" if closed else "kept reading"
    answer = reply.split(b'"error":"')[1].split(b'"')[0].decode() if b'"error":"' in reply else "no reply"
    return f"{what} after {sent / 2**20:.2f} MiB, {answer}, RSS {grown:+.1f} MiB"


def one_message(path: str, message: bytes) -> str:
    sock = connect(path)
    sock.settimeout(5)
    try:
        sock.sendall(message)
        data = sock.recv(4096)
    except OSError as exc:
        return f"connection error ({type(exc).__name__})"
    finally:
        sock.close()
    if not data:
        return "closed without a reply"
    if b'"error":"' in data:
        return data.split(b'"error":"')[1].split(b'"')[0].decode()
    return "answered"


def alive(path: str) -> bool:
    try:
        sock = connect(path)
        sock.sendall(GET_INFO)
        ok = len(read_replies(sock, 1)) == 1
        sock.close()
        return ok
    except OSError:
        return False


def measure(kind: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ss-proto-", dir="/tmp") as d:
        path = str(Path(d) / "c.sock")
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, path],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            result: dict[str, Any] = {"impl": kind}
            round_trips(path, 500)  # warm up
            result["roundTripUs"] = min(round_trips(path) for _ in range(3))
            result["pipelinedMs"] = min(pipelined(path) for _ in range(3))
            result["oversized"] = oversized(path, server.pid)
            result["aliveAfterOversized"] = alive(path)
            # 32,000 deep: under 64 KiB, so the nesting itself is what is tested
            result["nested"] = one_message(path, b"[" * 32_000 + b"]" * 32_000 + b"\0")
            result["notUtf8"] = one_message(path, b'{"method": "\xff\xfe"}\0')
            result["aliveAtEnd"] = alive(path)
        finally:
            server.terminate()
            _, err = server.communicate(timeout=10)
        result["tracebacks"] = err.count("Traceback")
    return result


def report(results: list[dict[str, Any]]) -> str:
    lines = [
        "| implementation | round trip, µs | 10,000 pipelined, ms | 16 MiB without NUL | 32,000-deep array "
        "| not UTF-8 | answers afterwards | tracebacks in the server |",
        "|---|---:|---:|---|---|---|---|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['impl']} | {r['roundTripUs']:.1f} | {r['pipelinedMs']:.0f} | {r['oversized']} | {r['nested']} "
            f"| {r['notUtf8']} | {'yes' if r['aliveAfterOversized'] and r['aliveAtEnd'] else 'no'} "
            f"| {r['tracebacks']} |"
        )
    return "\n".join(lines)


def run() -> list[dict[str, Any]]:
    kinds = ["ours"] + (["asyncvarlink"] if importlib.util.find_spec("asyncvarlink") else [])
    return [measure(kind) for kind in kinds]


@pytest.mark.bench
def test_socket_protocol() -> None:
    results = run()
    print(report(results))
    ours = results[0]
    assert ours["aliveAfterOversized"] and ours["aliveAtEnd"]
    assert ours["oversized"].startswith("closed the connection")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        {"ours": serve_ours, "asyncvarlink": serve_asyncvarlink}[args.serve[0]](args.serve[1])
        return 0
    print(report(run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
