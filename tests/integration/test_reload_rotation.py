"""A rotated credential swaps the token source: no session restarts, a refused one changes nothing.

* A good new Genesys client secret: the daemon (a child process, its control socket, ``ctl reload``
  as a script runs it) fetches a token with it before anything changes, takes it, and restarts
  nothing: the simulator records no new Web Messaging guest session and no new notifications
  channel, and the only token it issued was for the new secret (it accepts no other any more).
* A bad new secret: ``ctl reload`` exits 1 with one line; the daemon keeps the credential in use
  (a session started afterwards still gets its channel with it), ``credentials`` is raised as a
  degraded condition, and cleared by the reload that brings a good secret.
* In the test's process, over the same reload paths: the rotated source is the one later refreshes
  ask; CXone's rotated access key logs in once and starts no agent session anew; a Web Messaging
  guest does not depend on the OAuth client (a new clientId restarts the notifications sessions only).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from supervisor.api.protocol import Method
from supervisor.config import load_config
from supervisor.runtime.reload import Reloader
from supervisor.sim.cxone import CxoneSimulator
from supervisor.sim.genesys import GenesysSimConfig, GenesysSimulator
from supervisor.vocabulary import Platform
from tests.harness.config import (
    Credentials,
    config_file,
    cxone_config,
    genesys_config,
    short_dir,
    sockets_table,
)
from tests.harness.in_process import supervised
from tests.harness.process import CLI, Daemon, running_daemon
from tests.harness.simulators import StartGenesys
from tests.harness.waits import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

CLIENT = "demo-client"  # tests/harness/config.py: genesys_config's clientId
OLD, NEW, WRONG = "secret-before-rotation", "secret-after-rotation", "not-the-secret"
CHANNELS = "/api/v2/notifications/channels"
SUBSCRIPTIONS = CHANNELS + "/{channelId}/subscriptions"
AGENT_SESSIONS = "/inContactAPI/services/v{N}.0/agent-sessions"


def rotation_config(urls: dict[str, str], directory: Path, *, guests: int, notifications: int) -> Path:
    """Guests ``wm-i`` and notifications sessions ``nt-i``, the sockets where the process harness
    looks for them, the Genesys client secret file holding OLD."""
    sockets = directory / "sockets"
    sockets.mkdir()
    text = sockets_table(sockets / "subscribe.sock", sockets / "control.sock")
    text += genesys_config(urls, guests, notifications=notifications)
    return config_file(directory, text, Credentials(genesys=OLD, cxone=None, cxone_password=None))


async def ctl_reload(daemon: Daemon, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [*CLI, "ctl", "--socket", str(daemon.control), "reload", *args], check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def conditions(daemon: Daemon, event: str) -> list[str]:
    return [r["condition"] for r in daemon.named(event)]


async def test_a_good_new_genesys_secret_swaps_the_token_source_and_touches_no_session(
    start_genesys: StartGenesys,
) -> None:
    sim = await start_genesys(GenesysSimConfig(clients={CLIENT: OLD}), seed=31)
    with short_dir("ss-rot-") as directory:
        config = rotation_config(sim.urls, directory, guests=2, notifications=2)
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(4)
            guests, channels = len(sim.state.sessions), sim.recorder.request_count("POST", CHANNELS)
            tokens = sim.recorder.tokens()
            # the two notifications sessions share one channel (the default's shared channels)
            assert (guests, channels, tokens["issued"]) == (2, 1, 1)
            # the platform's administrator regenerates the secret; the operator puts it in the file
            sim.rotate_client_secret(CLIENT, NEW)
            (directory / "genesys-secret").write_text(NEW)
            code, out, err = await ctl_reload(daemon, "--json")
            assert (code, err) == (0, "")
            result = json.loads(out)["result"]
            assert result["credentialsRotated"] == ["genesys"]
            assert (result["restarted"], result["added"], result["removed"]) == ([], [], [])
            assert result["unchanged"] == 4 and result["restartRequired"] == []
            # one token, fetched with the new secret: the platform accepts no other now
            after = sim.recorder.tokens()
            assert (after["issued"], after["rejected"]) == (tokens["issued"] + 1, tokens["rejected"])
            # no guest answered as a new session, no channel created, every socket still the same
            assert len(sim.state.sessions) == guests
            assert sim.recorder.request_count("POST", CHANNELS) == channels
            assert sim.recorder.connections_open("webmessaging") == 2
            assert sim.recorder.connections_open("streaming") == 1
            status = await daemon.acall(Method.STATUS)
            assert status["sessions"]["byState"] == {"active": 4}
            (accepted,) = await daemon.arrived("CREDENTIAL_ACCEPTED")
            assert (accepted["platform"], accepted["rotated"]) == ("genesys", True)
            assert not daemon.named("SESSION_TERMINATED") and not daemon.named("CREDENTIAL_REFUSED")
            assert await daemon.stop() == 0
        # the secrets never reach a line
        assert NEW not in "\n".join(daemon.raw) + daemon.err and OLD not in "\n".join(daemon.raw)


async def test_a_refused_new_secret_keeps_the_one_in_use_until_a_good_one_arrives(
    start_genesys: StartGenesys,
) -> None:
    sim = await start_genesys(GenesysSimConfig(clients={CLIENT: OLD}), seed=32)
    with short_dir("ss-rot-") as directory:
        config = rotation_config(sim.urls, directory, guests=1, notifications=2)
        async with running_daemon(config) as daemon:
            await daemon.wait_ready(3)
            issued = sim.recorder.tokens()["issued"]
            (directory / "genesys-secret").write_text(WRONG)
            code, out, err = await ctl_reload(daemon)
            expected = (
                "platforms.genesys.clientSecretFile: the genesys token endpoint refused the new "
                "credential (HTTP 401 AUTH_CLIENT_INVALID): the credential in use stays, nothing is reloaded"
            )
            assert (code, out) == (1, "")
            assert err.splitlines() == [
                f"session-supervisor: error: io.sessionsupervisor.control.v1.ReloadFailed: {expected}"
            ]
            (refused,) = await daemon.arrived("CREDENTIAL_REFUSED")
            assert (refused["platform"], refused["problem"]) == ("genesys", expected)
            assert (await daemon.arrived("CONFIG_RELOAD_FAILED"))[-1]["error"] == expected
            await wait_until(lambda: conditions(daemon, "DAEMON_DEGRADED") == ["credentials"], 10)
            assert sim.recorder.tokens()["rejected"] == 1
            # the sessions run on, and the credential in use still serves: nt-0 stopped and started
            # again, its topic taken off its shared channel (one PUT) and back on it (a POST, or the
            # same PUT when the start came before it went out), each request authorised with the
            # token it holds
            status = await daemon.acall(Method.STATUS)
            assert status["sessions"]["byState"] == {"active": 3}

            def subscribed() -> int:
                return sum(sim.recorder.request_count(verb, SUBSCRIPTIONS, 200) for verb in ("PUT", "POST"))

            before = subscribed()
            await daemon.acall(Method.STOP_SESSION, {"sessionId": "nt-0"})
            await daemon.acall(Method.START_SESSION, {"sessionId": "nt-0"})
            await daemon.wait_ready(3)
            await wait_until(lambda: subscribed() > before, 10)
            (channel,) = sim.state.channels.values()
            await wait_until(
                lambda: sorted(channel.topics) == [f"v2.users.n-{i}.conversations" for i in range(2)], 10
            )
            assert sim.recorder.tokens()["issued"] == issued
            # a good secret arrives: rotated, and the condition clears
            sim.rotate_client_secret(CLIENT, NEW)
            (directory / "genesys-secret").write_text(NEW)
            result = (await daemon.acall(Method.RELOAD))["result"]
            assert (result["credentialsRotated"], result["restarted"]) == (["genesys"], [])
            await wait_until(lambda: conditions(daemon, "DAEMON_RECOVERED") == ["credentials"], 10)
            assert [r["rotated"] for r in await daemon.arrived("CREDENTIAL_ACCEPTED")] == [True]
            # nothing ended but the session the test stopped itself
            ended = [(r["sessionId"], r["reason"]) for r in daemon.named("SESSION_TERMINATED")]
            assert ended == [("nt-0", "STOPPED")]
            assert await daemon.stop() == 0
        assert WRONG not in "\n".join(daemon.raw) + daemon.err


async def test_after_a_rotation_the_refreshes_ask_with_the_new_secret(
    start_genesys: StartGenesys, tmp_path: Path
) -> None:
    """The token granted to the new secret is taken at the next refresh (no second fetch), and the
    refresh after it asks the token endpoint with the new secret, the only one it accepts now."""
    sim = await start_genesys(GenesysSimConfig(clients={CLIENT: OLD}), seed=33)
    text = genesys_config(sim.urls, 0, notifications=1)
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    async with supervised(text, tmp_path, credentials=Credentials(genesys=OLD)) as h:
        await h.wait(lambda: h.all_in("active"))
        tokens = h.supervisor.wiring.tokens[Platform.GENESYS]
        in_use = tokens.current
        sim.rotate_client_secret(CLIENT, NEW)
        (tmp_path / "genesys-secret").write_text(NEW)
        result = await Reloader(h.supervisor, lambda: load_config(path)).reload()
        assert (result.error, result.rotated, result.restarted) == (None, (Platform.GENESYS,), ())
        assert tokens.current is in_use  # the channel's token is not replaced: no rollover
        issued = sim.recorder.tokens()
        granted = await tokens.refresh(in_use)
        assert granted is not in_use and sim.recorder.tokens() == issued  # the granted one, taken
        await tokens.refresh(granted)
        after = sim.recorder.tokens()
        assert after["rejected"] == issued["rejected"]
        assert after["issued"] + after["refreshed"] == issued["issued"] + issued["refreshed"] + 1


@pytest.mark.cxone_sim(seed=34)
async def test_a_rotated_cxone_access_key_logs_in_once_and_starts_no_agent_session(
    cxone_sim: CxoneSimulator, tmp_path: Path
) -> None:
    text = cxone_config(cxone_sim.urls, 2)
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    async with supervised(text, tmp_path) as h:
        await h.wait(lambda: h.all_in("active"))
        starts = cxone_sim.recorder.request_count("POST", AGENT_SESSIONS)
        ends = cxone_sim.recorder.request_count("DELETE")
        login = h.supervisor.wiring.tokens[Platform.CXONE]
        (tmp_path / "cxone-password").write_text("the-rotated-access-key-secret")
        result = await Reloader(h.supervisor, lambda: load_config(path)).reload()
        assert (result.error, result.rotated, result.restarted) == (None, (Platform.CXONE,), ())
        assert h.supervisor.wiring.tokens[Platform.CXONE] is login  # the same cache, a new source
        assert cxone_sim.recorder.request_count("POST", AGENT_SESSIONS) == starts
        assert cxone_sim.recorder.request_count("DELETE") == ends
        assert all(r.state.value == "active" for r in h.runners.values())
        (accepted,) = h.recorded.named("CREDENTIAL_ACCEPTED")
        assert accepted["platform"] == "cxone"


@pytest.mark.genesys_sim(seed=35)
async def test_a_web_messaging_guest_does_not_depend_on_the_oauth_client(
    genesys_sim: GenesysSimulator, tmp_path: Path
) -> None:
    """Another clientId is another OAuth client: the notifications sessions (its channels, its
    tokens) restart on it; the guests' connections never used it and are not touched. REST calls
    made on a guest's behalf (attribute updates) use the new client's token cache, and a fail-fast
    of one revokes that cache, not the retired one."""
    text = genesys_config(genesys_sim.urls, 2, notifications=1)
    path = tmp_path / "supervisor.toml"
    path.write_text(text)
    async with supervised(text, tmp_path) as h:
        await h.wait(lambda: h.all_in("active"))
        guests = {i: r for i, r in h.runners.items() if i.startswith("wm-")}
        retired = h.supervisor.wiring.tokens[Platform.GENESYS]
        path.write_text(text.replace(f'clientId = "{CLIENT}"', 'clientId = "another-client"'))
        result = await Reloader(h.supervisor, lambda: load_config(path)).reload()
        assert (result.error, result.restarted) == (None, ("nt-0",))
        assert {i: h.runners[i] for i in guests} == guests  # the same runners
        assert len(genesys_sim.state.sessions) == 2
        current = h.supervisor.wiring.tokens[Platform.GENESYS]
        assert current is not retired
        assert all(r.tokens is current for r in guests.values())
