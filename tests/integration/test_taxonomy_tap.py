"""``[taxonomy] capture`` and ``shadow`` on a daemon against the Genesys simulator (docs/taxonomy.md).

* Capture: failing answers that carry a client secret, a bearer token, a guest JWT, a guest's
  message and a sensitive attribute value are captured, and none of them is in the file (0600, under
  the state directory); the file is what ``classify`` and ``taxonomy diff --replay`` read: replayed
  against an overlay that renames a code, ``diff`` shows the difference (a subprocess, exit codes).
* A capture that cannot be written turns itself off with one TAXONOMY_CAPTURE_FAILED; the daemon goes on.
* Shadow: a version that routes 429 otherwise is reported (SHADOW_DIVERGENCE, once per pair per
  minute with a count, on a fake clock), and the daemon routes by the active one.

The retry executor's backoff is swapped for one that takes no time, as tests/integration/test_runtime_rest.py does:
the waits are the policy's business, not what these tests are about.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from supervisor.clock import FakeClock
from supervisor.errors import OperationError
from supervisor.sim.faults import Fault, FaultKind
from supervisor.sim.genesys import GenesysSimulator
from supervisor.transports.webmessaging import WebMessagingTransport
from tests.harness.clocks import advancing
from tests.harness.config import Credentials, daemon_config, genesys_config, short_dir
from tests.harness.in_process import Harness, supervised
from tests.harness.process import CLI, Output, running_daemon
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.genesys_sim(seed=11)]

THROTTLED = Path(__file__).parent.parent / "fixtures" / "taxonomy" / "throttled.toml"
CLIENT_SECRET = "s3cr3t-0f-the-genesys-client"
BEARER = "Bearer 7d1f9a0b4c2e8d6f5a3b"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJndWVzdC0xIn0.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
GUEST_MESSAGE = "my card ends 4242 call me on 555-0100"
SENSITIVE = "123-45-6789"


def taxonomy_table(**keys: Any) -> str:
    return "[taxonomy]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())


def config(sim: GenesysSimulator, state: Path, **taxonomy: Any) -> str:
    # the state directory is the store's directory ([store] path); the store itself is not opened.
    # Adaptive admission off: a 429's Retry-After would pause the endpoint for real seconds (its
    # pacing is not what these tests are about)
    return (
        genesys_config(sim.urls, 1, adaptive=False)
        + f'[store]\npath = "{state / "store.sqlite3"}"\n'
        + '[attributes]\nsensitive = ["ssn"]\n'
        + taxonomy_table(**taxonomy)
    )


async def no_wait(seconds: float) -> None:
    del seconds


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=30, check=False)


async def active(h: Harness, sim: GenesysSimulator) -> tuple[str, WebMessagingTransport]:
    await h.wait(lambda: len(h.runners) == 1 and h.all_in("active"))
    transport = h.runners["wm-0"].transport
    assert isinstance(transport, WebMessagingTransport)
    conversation = sim.conversation_of(transport.guest_token)
    assert conversation is not None
    return conversation.id, transport


async def failing_answers(h: Harness, sim: GenesysSimulator) -> str:
    """Failures whose answers carry every secret; the guest token, which is one too."""
    api = sim.urls["api"]
    # the token endpoint's failing answer names the client secret (the first REST call fetches a token)
    sim.faults.inject(
        Fault(
            kind=FaultKind.SERVER_ERROR_BURST,
            count=1,
            endpoint="POST /oauth/token",
            params={"message": f"bad client secret {CLIENT_SECRET}"},
        )
    )
    cid, transport = await active(h, sim)
    guest_token = transport.guest_token
    assert guest_token is not None
    h.supervisor.wiring.executor._sleep = no_wait  # the backoff's waits take no time
    sim.faults.inject(
        Fault(
            kind=FaultKind.SERVER_ERROR_BURST,
            count=1,
            endpoint="GET /api/v2/conversations/*",
            params={"status": 500, "message": f"{BEARER} {JWT} {guest_token[:60]}"},
        )
    )
    sim.faults.inject(Fault(kind=FaultKind.RATE_LIMIT_STORM, count=1, endpoint="GET /api/v2/conversations/*"))
    response = await h.supervisor.request("wm-0", "GET", f"{api}/api/v2/conversations/{cid}")
    assert response.status_code == 200
    customer = next(p for p in response.json()["participants"] if p["purpose"] == "customer")
    sim.faults.inject(
        Fault(
            kind=FaultKind.SERVER_ERROR_BURST,
            count=1,
            endpoint="PATCH */attributes",
            params={"message": f"attribute ssn={SENSITIVE} refused"},
        )
    )
    patched = await h.supervisor.request(
        "wm-0",
        "PATCH",
        f"{api}/api/v2/conversations/{cid}/participants/{customer['id']}/attributes",
        json={"attributes": {"ssn": SENSITIVE}},
    )
    assert patched.status_code == 202
    # the guest's own message, refused once by the Web Messaging socket with its text in the answer
    sim.faults.inject(
        Fault(
            kind=FaultKind.SERVER_ERROR_BURST,
            count=1,
            endpoint="WS /v1",
            params={"message": f"refused: {GUEST_MESSAGE}"},
        )
    )
    await h.supervisor.send_message("wm-0", GUEST_MESSAGE)
    return guest_token


async def captured_run(sim: GenesysSimulator, tmp_path: Path) -> tuple[Path, list[str], Harness]:
    state = tmp_path / "state"
    state.mkdir()
    text = config(sim, state, capture="errors.ndjson")
    async with supervised(text, tmp_path, credentials=Credentials(genesys=CLIENT_SECRET)) as h:
        guest_token = await failing_answers(h, sim)
        classified = h.recorded.named("SDK_ERROR_CLASSIFIED")
    planted = [CLIENT_SECRET, BEARER.split()[1], JWT, guest_token, guest_token[:60], GUEST_MESSAGE, SENSITIVE]
    assert len(classified) >= 5, classified
    return state / "errors.ndjson", planted, h


async def test_a_capture_keeps_what_routes_each_failure_and_no_secret(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    path, planted, h = await captured_run(genesys_sim, tmp_path)
    content = path.read_text()
    for secret in planted:
        assert secret not in content, secret
    assert "ssn" not in content  # not even the attribute's name (a body's message is dropped whole)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    lines = [json.loads(line) for line in content.splitlines()]
    # one line per failure the daemon classified, in order, each what routes it
    classified = h.recorded.named("SDK_ERROR_CLASSIFIED")
    assert len(lines) == len(classified)
    statuses = {(line["channel"], line.get("status")) for line in lines}
    assert {("rest", 503), ("rest", 500), ("rest", 429), ("webmessaging", None)} <= statuses
    rest_500 = next(line for line in lines if line.get("status") == 500)
    assert rest_500["endpoint"] == "/api/v2/conversations/{id}" and rest_500["method"] == "GET"
    assert rest_500["body"] == {"code": "(other)"}
    # what classify reads: every line a valid envelope, routed as the daemon routed it
    replayed = run("classify", "--taxonomy", "v2", str(path))
    assert replayed.returncode == 0, replayed.stderr
    codes = [json.loads(line)["code"] for line in replayed.stdout.splitlines()]
    assert codes == [e["code"] for e in classified]


async def test_a_captured_run_replayed_against_an_overlay_shows_the_renamed_code(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    path, _, _ = await captured_run(genesys_sim, tmp_path)
    lines = path.read_text().splitlines()
    throttled = [n for n, line in enumerate(lines, 1) if json.loads(line).get("status") == 429]
    assert throttled
    diff = run("taxonomy", "diff", "v2", str(THROTTLED), "--replay", str(path))
    assert diff.returncode == 0, diff.stderr
    for n in throttled:
        assert f"replay line {n}: code: RATE_LIMITED → THROTTLED" in diff.stdout.splitlines()
    assert "no routing differences" not in diff.stdout
    gate = run("taxonomy", "diff", "v2", str(THROTTLED), "--replay", str(path), "--fail-on-diff", "--json")
    assert gate.returncode == 1
    doc = json.loads(gate.stdout)
    assert [r["line"] for r in doc["replay"]] == throttled
    assert {(r["before"]["code"], r["after"]["code"]) for r in doc["replay"]} == {
        ("RATE_LIMITED", "THROTTLED")
    }
    # the same file against the version that captured it: nothing differs
    same = run("taxonomy", "diff", "v2", "v2", "--replay", str(path), "--fail-on-diff")
    assert same.returncode == 0 and same.stdout.splitlines()[-1] == "no routing differences"


async def test_a_capture_that_cannot_be_written_stops_once_and_the_daemon_goes_on(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    # a file already full, and where its rotation goes a directory that is not empty: the first
    # line's rotation fails (rename(2): EISDIR), a real filesystem error
    (state / "errors.ndjson").write_bytes(b"x" * 4096)
    (state / "errors.ndjson.1").mkdir()
    (state / "errors.ndjson.1" / "keep").write_text("")
    text = config(genesys_sim, state, capture="errors.ndjson", captureFiles=2, captureMaxBytes=8192)
    async with supervised(text, tmp_path) as h:
        cid, _ = await active(h, genesys_sim)
        h.supervisor.wiring.executor._sleep = no_wait
        api = genesys_sim.urls["api"]
        for _ in range(3):
            genesys_sim.faults.inject(
                Fault(kind=FaultKind.SERVER_ERROR_BURST, count=1, endpoint="GET /api/v2/conversations/*")
            )
            response = await h.supervisor.request("wm-0", "GET", f"{api}/api/v2/conversations/{cid}")
            assert response.status_code == 200
        await h.wait(lambda: bool(h.recorded.named("TAXONOMY_CAPTURE_FAILED")))
        failed = h.recorded.named("TAXONOMY_CAPTURE_FAILED")
        assert len(failed) == 1
        assert failed[0]["path"] == str(state / "errors.ndjson") and failed[0]["captured"] == 0
        assert "directory" in failed[0]["problem"].lower()
        # the sessions go on, and so does classification
        assert h.all_in("active") and h.terminations() == {}
        assert len(h.recorded.named("SDK_ERROR_CLASSIFIED")) == 3
    assert len(h.recorded.named("TAXONOMY_CAPTURE_FAILED")) == 1
    assert (state / "errors.ndjson").read_bytes() == b"x" * 4096


@pytest.mark.genesys_sim(seed=11, fake_clock=True)
async def test_a_shadow_that_routes_429_otherwise_is_reported_once_a_minute_with_a_count(
    genesys_sim: GenesysSimulator, clock: FakeClock, tmp_path: Path
) -> None:
    text = config(genesys_sim, tmp_path, shadow=str(THROTTLED))
    async with supervised(text, tmp_path, clock=clock) as h:
        cid, _ = await active(h, genesys_sim)
        h.supervisor.wiring.executor._sleep = advancing(clock)
        url = f"{genesys_sim.urls['api']}/api/v2/conversations/{cid}"

        async def too_many(count: int) -> None:
            genesys_sim.faults.inject(
                Fault(
                    kind=FaultKind.RATE_LIMIT_STORM,
                    count=count,
                    endpoint="GET /api/v2/conversations/*",
                    params={"retry_after": "1"},
                )
            )
            try:
                assert (await h.supervisor.request("wm-0", "GET", url)).status_code == 200
            except OperationError:  # pragma: no cover - the budget is 2 retries: never spent here
                raise

        await too_many(2)  # two 429s: the first reported at once, the second held
        reports = h.recorded.named("SHADOW_DIVERGENCE")
        assert [(r["activeCode"], r["shadowCode"], r["count"]) for r in reports] == [
            ("RATE_LIMITED", "THROTTLED", 1)
        ]
        assert reports[0]["activeVersion"] == "v2" and reports[0]["shadowVersion"] == "v2-throttled"
        assert list(reports[0]["changed"]) == ["code"] and reports[0]["periodS"] == 60.0
        clock.advance(60.0)
        await too_many(1)  # past the minute: reported at once, with the one held
        reports = h.recorded.named("SHADOW_DIVERGENCE")
        assert [r["count"] for r in reports] == [1, 2]
        # every one counted (what the metric reads), and the daemon routed by the active version
        assert h.supervisor.wiring.taxonomy_tap.divergences == {("RATE_LIMITED", "THROTTLED"): 3}
        classified = h.recorded.named("SDK_ERROR_CLASSIFIED")
        assert [(e["code"], e["taxonomyVersion"]) for e in classified] == [("RATE_LIMITED", "v2")] * 3
        retried = h.recorded.named("RETRY_ATTEMPT")
        assert {r["code"] for r in retried} == {"RATE_LIMITED"}


def refused(daemon: Output) -> list[dict[str, Any]]:
    return [e for e in daemon.named("SDK_ERROR_CLASSIFIED") if e["code"] == "RATE_LIMITED"]


async def test_a_daemon_run_as_a_process_captures_and_shadows_what_it_meets(
    genesys_sim: GenesysSimulator,
) -> None:
    """``run --config`` as users run it: the composition root wires capture (under $STATE_DIRECTORY)
    and the shadow, their lines are on standard output, and the file replays after a SIGTERM."""
    with short_dir() as directory:
        state = directory / "state"
        state.mkdir()
        extra = taxonomy_table(capture="errors.ndjson", shadow=str(THROTTLED))
        sessions = [(f"wm-{i}", None) for i in range(3)]
        path = daemon_config(genesys_sim.urls, directory, sessions, extra=extra)
        async with running_daemon(path, env={"STATE_DIRECTORY": str(state)}) as daemon:
            await daemon.wait_ready(3)
            # the guests' sockets dropped, and their reconnections refused 429 by the platform's admission
            genesys_sim.faults.inject(
                Fault(
                    kind=FaultKind.ADMISSION_LIMIT,
                    params={"rate_per_s": 0, "status": 429, "retry_after": "1"},
                )
            )
            genesys_sim.faults.inject(Fault(kind=FaultKind.DROP))
            await wait_until(lambda: bool(daemon.named("SHADOW_DIVERGENCE")), 20.0)
            # another refusal within the minute: held, and published at the stop with its count
            await wait_until(lambda: len(refused(daemon)) >= 2, 20.0)
            assert await daemon.stop() == 0  # SIGTERM: the drain, the held counts, the capture's last lines
        (report, *_) = daemon.named("SHADOW_DIVERGENCE")
        assert (report["activeCode"], report["shadowCode"], report["count"]) == (
            "RATE_LIMITED",
            "THROTTLED",
            1,
        )
        assert sum(r["count"] for r in daemon.named("SHADOW_DIVERGENCE")) == len(refused(daemon)) >= 2
        capture = state / "errors.ndjson"
        lines = [json.loads(line) for line in capture.read_text().splitlines()]
        assert len(lines) == len(daemon.named("SDK_ERROR_CLASSIFIED"))
        assert {"closeCode": 1006}.items() <= lines[0].items()
        assert stat.S_IMODE(os.stat(capture).st_mode) == 0o600
        diff = run("taxonomy", "diff", "v2", str(THROTTLED), "--replay", str(capture), "--fail-on-diff")
        assert diff.returncode == 1
        assert "code: RATE_LIMITED → THROTTLED" in diff.stdout
