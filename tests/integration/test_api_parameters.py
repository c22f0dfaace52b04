"""Every parameter of every method, with every wrong type, is a typed InvalidParameter.

The cases are generated from what the daemon itself says it takes: the test asks each socket for
``GetInfo`` and ``GetInterfaceDescription``, parses the descriptions, and for each parameter of
each method sends values of every JSON type the parameter's varlink type does not admit (and
integers past 64 bits, and wrong items inside lists, objects and structs). A method added to a
description later is covered without touching this file. Whether a value fits its type is decided
here independently of the daemon's checker (:func:`fits`).

The daemon is a real ``run`` process with a store (so that the attribute verbs reach SQLite, where
a mismatchId past 64 bits used to overflow), spoken to over its real Unix sockets; one connection
per socket carries every call, so a call that broke the connection would fail every one after it.
"""

from __future__ import annotations

import json
import math
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.api.protocol import CONTROL, SERVICE, STATE, ApiFault, Method, encode_call, parse_reply
from supervisor.api.signatures import Interface, Kind, VType, parse_interface
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from tests.harness.config import daemon_config
from tests.harness.process import CLI, running_daemon

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.genesys_sim(GenesysSimConfig(rate_limit=1_000_000), seed=61),
]

# one value of every JSON kind, and the integers just past a signed 64-bit one
POOL: tuple[Any, ...] = (
    None,
    True,
    0,
    -7,
    2**63,
    -(2**63) - 1,
    2**64,
    1.5,
    "",
    "x",
    [],
    ["x"],
    [1],
    {},
    {"k": "v"},
    {"k": 1},
)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ss-par-", dir="/tmp") as d:
        yield Path(d)


class Line:
    """One blocking connection carrying many calls, one reply each."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(str(path))
        self.buffer = b""

    def call(self, method: str, parameters: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        self.sock.sendall(encode_call(method, parameters))
        while b"\0" not in self.buffer:
            data = self.sock.recv(1 << 16)
            assert data, f"{method} {parameters!r}: the daemon closed the connection"
            self.buffer += data
        frame, _, self.buffer = self.buffer.partition(b"\0")
        reply = parse_reply(frame)
        return reply.error, reply.parameters

    def close(self) -> None:
        self.sock.close()


def fits(value: Any, vtype: VType, types: dict[str, VType]) -> bool:
    """Whether ``value`` is of varlink type ``vtype`` (the test's own reading of varlink.org's types)."""
    kind = vtype.kind
    if kind is Kind.NULLABLE:
        assert vtype.inner is not None
        return value is None or fits(value, vtype.inner, types)
    if kind is Kind.NAMED:
        return fits(value, types[vtype.name], types)
    if kind is Kind.BOOL:
        return isinstance(value, bool)
    if kind is Kind.INT:
        return type(value) is int and -(2**63) <= value < 2**63
    if kind is Kind.FLOAT:
        return type(value) in (int, float) and math.isfinite(value)
    if kind is Kind.STRING:
        return isinstance(value, str)
    if kind is Kind.ENUM:
        return value in vtype.names
    if kind is Kind.ARRAY:
        assert vtype.inner is not None
        return isinstance(value, list) and all(fits(v, vtype.inner, types) for v in value)
    if kind is Kind.MAP:
        assert vtype.inner is not None
        return isinstance(value, dict) and all(fits(v, vtype.inner, types) for v in value.values())
    if kind is Kind.STRUCT:
        return isinstance(value, dict) and all(fits(value.get(f.name), f.type, types) for f in vtype.fields)
    return isinstance(value, dict)  # object


def example(vtype: VType, types: dict[str, VType]) -> Any:
    """A value of the type (for the parameters of a call other than the one made wrong)."""
    kind = vtype.kind
    if kind is Kind.NULLABLE:
        return None
    if kind is Kind.NAMED:
        return example(types[vtype.name], types)
    if kind is Kind.STRUCT:
        return {f.name: example(f.type, types) for f in vtype.fields}
    if kind is Kind.ENUM:
        return vtype.names[0]
    return {
        Kind.BOOL: False,
        Kind.INT: 1,
        Kind.FLOAT: 1.0,
        Kind.STRING: "x",
        Kind.ARRAY: [],
        Kind.MAP: {},
        Kind.OBJECT: {},
    }[kind]


def wrong_values(vtype: VType, types: dict[str, VType]) -> list[Any]:
    """Values that do not fit ``vtype``: pool values, and wrong items inside containers of it."""
    out = [v for v in POOL if not fits(v, vtype, types)]
    inner = vtype.inner if vtype.kind is Kind.NULLABLE else vtype
    assert inner is not None
    if inner.kind is Kind.NAMED:
        inner = types[inner.name]
    if inner.kind in (Kind.ARRAY, Kind.MAP):
        assert inner.inner is not None
        good = example(inner.inner, types)
        for bad in wrong_values(inner.inner, types)[:6]:
            out.append([good, bad] if inner.kind is Kind.ARRAY else {"a": good, "b": bad})
    if inner.kind is Kind.STRUCT:
        for field in inner.fields:
            for bad in wrong_values(field.type, types)[:6]:
                out.append({**example(inner, types), field.name: bad})
    return out


def cases(interface: Interface) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, the parameter made wrong, the call's parameters) for every parameter of every method."""
    for method, fields in interface.methods.items():
        full = f"{interface.name}.{method}"
        valid = {f.name: example(f.type, interface.types) for f in fields}
        for field in fields:
            for bad in wrong_values(field.type, interface.types):
                yield full, field.name, {**valid, field.name: bad}
            if not field.type.nullable:
                yield full, field.name, {k: v for k, v in valid.items() if k != field.name}


def described(line: Line, interface: str) -> Interface:
    error, reply = line.call(Method.GET_INTERFACE_DESCRIPTION, {"interface": interface})
    assert error is None, reply
    return parse_interface(reply["description"])


def run_cases(line: Line, interface: Interface) -> tuple[int, list[str]]:
    """How many cases were sent, and the ones not answered InvalidParameter naming the parameter."""
    wrong = []
    count = 0
    for method, parameter, parameters in cases(interface):
        count += 1
        error, reply = line.call(method, parameters)
        if error != ApiFault.INVALID_PARAMETER or reply.get("parameter") != parameter:
            wrong.append(f"{method} {json.dumps(parameters)} -> {error} {reply}")
    return count, wrong


async def test_every_parameter_of_every_method_refuses_every_wrong_type(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    conv = genesys_sim.create_conversation()
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id)], store=workdir / "store.sqlite3")
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(active=1)
        control = Line(daemon.control)
        subscribe = Line(daemon.control.with_name("subscribe.sock"))
        try:
            error, info = control.call(Method.GET_INFO, {})
            assert error is None and CONTROL in info["interfaces"]
            sent: dict[str, int] = {}
            problems: list[str] = []
            runs = [(control, described(control, name)) for name in info["interfaces"]]
            runs += [(subscribe, described(subscribe, SERVICE)), (subscribe, described(subscribe, STATE))]
            for line, interface in runs:
                count, wrong = await anyio.to_thread.run_sync(run_cases, line, interface)
                sent[interface.name] = sent.get(interface.name, 0) + count
                problems += wrong
            assert problems == []
            # every method with parameters got cases: the interfaces were really read
            assert sent[CONTROL] > 100 and sent[STATE] > 20 and sent[SERVICE] > 10
            # and the verbs run afterwards: nothing above reached state or broke the connections
            error, status = control.call(Method.STATUS, {})
            assert error is None and status["sessions"]["byState"] == {"active": 1}
            assert status["sockets"]["control"]["internalErrors"] == 0
            assert status["sockets"]["subscribe"]["internalErrors"] == 0
        finally:
            control.close()
            subscribe.close()
        assert await daemon.stop() == 0
    assert "Traceback" not in daemon.err and daemon.named("CONTROL_COMMAND") == []
    assert daemon.err == ""


async def test_resolve_mismatch_with_a_list_or_an_id_past_64_bits_is_answered(
    genesys_sim: GenesysSimulator, workdir: Path
) -> None:
    """The issue's two cases, from ctl as a script runs it: one line naming the parameter, no peer-check blame."""
    conv = genesys_sim.create_conversation()
    config = daemon_config(genesys_sim.urls, workdir, [("wm-0", conv.id)], store=workdir / "store.sqlite3")
    async with running_daemon(config) as daemon:
        await daemon.wait_ready(active=1)
        line = Line(daemon.control)
        try:
            for parameters, parameter in [
                ({"mismatchId": 1, "resolution": ["resend"]}, "resolution"),
                ({"mismatchId": 1, "resolution": {"resend": True}}, "resolution"),
                ({"mismatchId": 2**63, "resolution": "resend"}, "mismatchId"),
            ]:
                error, reply = line.call(Method.RESOLVE_MISMATCH, parameters)
                assert (error, reply["parameter"]) == (ApiFault.INVALID_PARAMETER, parameter)
            # the same connection still answers, with the verb's own error for a well-typed unknown id
            error, reply = line.call(
                Method.RESOLVE_MISMATCH, {"mismatchId": 2**63 - 1, "resolution": "resend"}
            )
            assert error == ApiFault.NO_SUCH_MISMATCH
        finally:
            line.close()
        # ctl refuses an id past 64 bits itself (exit 2), never sending it
        done = await anyio.run_process(
            [*CLI, "ctl", "--socket", str(daemon.control), "resolve", str(2**63), "--resend"], check=False
        )
        err = done.stderr.decode()
        assert done.returncode == 2 and err.count("\n") == 1 and "ID" in err and "Traceback" not in err
        assert await daemon.stop() == 0
    assert daemon.err == ""
