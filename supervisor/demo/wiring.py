"""The demo's plumbing: the simulators' configs, credential files, the daemon's config.

Everything lives on loopback and in one temporary directory: the credentials the daemon
reads (``clientSecretFile``, ``passwordFile``; the simulators accept any) and, with
``--fast``, a copy of taxonomy v1 whose backoff delays are scaled down.
"""

from __future__ import annotations

import re
import secrets
from importlib import resources
from pathlib import Path
from typing import Any

from supervisor.config import Config, parse_config
from supervisor.demo.scenarios import Fleet, Scenario, Timing, kind_of
from supervisor.sim.cxone import CxoneSimConfig
from supervisor.sim.genesys.config import GenesysSimConfig
from supervisor.taxonomy.loader import DEFAULT_VERSION

DEPLOYMENT_ID = "demo-deployment"
GENESYS_CLIENT_ID = "demo-client"
CXONE_CLIENT_ID = "demo-app@demo-vendor"
CXONE_USER = "demo.agent@example.com"
FIRST_CXONE_AGENT = 200001


def genesys_sim_config(scenario: Scenario, timing: Timing) -> GenesysSimConfig:
    # the REST rate limit is per token (300/min on Genesys): the demo's one token serves every
    # notifications session, so only the scenario's faults should rate-limit it
    if scenario.short_tokens:
        return GenesysSimConfig(rate_limit=1_000_000, token_ttl_s=timing.token_ttl_s)
    return GenesysSimConfig(rate_limit=1_000_000)


def cxone_sim_config(scenario: Scenario, timing: Timing) -> CxoneSimConfig:
    if scenario.short_tokens:
        return CxoneSimConfig(token_ttl_s=timing.token_ttl_s)
    return CxoneSimConfig()


def write_credentials(directory: Path) -> dict[str, Path]:
    """Random throw-away secrets, one file each, readable by the owner only."""
    paths: dict[str, Path] = {}
    for name in ("genesys-client-secret", "cxone-client-secret", "cxone-password"):
        path = directory / name
        path.write_text(secrets.token_urlsafe(24) + "\n", encoding="utf-8")
        path.chmod(0o600)
        paths[name] = path
    return paths


_DELAY = re.compile(r"^(?P<key>baseDelayMs|maxDelayMs)\s*=\s*(?P<value>\d+)\s*$", re.MULTILINE)


def scaled_taxonomy(directory: Path, scale: float) -> str:
    """The default taxonomy with every backoff delay multiplied by ``scale``; returns the version
    to load."""
    if scale == 1.0:
        return DEFAULT_VERSION
    data = resources.files("supervisor.taxonomy") / "data" / f"{DEFAULT_VERSION}.toml"
    text = data.read_text(encoding="utf-8")

    def scaled(match: re.Match[str]) -> str:
        return f"{match.group('key')} = {max(0, round(int(match.group('value')) * scale))}"

    path = directory / f"{DEFAULT_VERSION}-fast.toml"
    path.write_text(_DELAY.sub(scaled, text), encoding="utf-8")
    return str(path)


def session_specs(fleet: Fleet, conversations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``sessions`` of the daemon config: see :mod:`supervisor.demo.scenarios` for the mix."""
    specs: list[dict[str, Any]] = []
    for i in range(fleet.sessions):
        kind = kind_of(i)
        if kind == "webmessaging":
            spec = {"id": f"wm-{i:04d}", "platform": "genesys", "kind": "webmessaging"}
            if conversations and spec["id"] in conversations:
                # the conversation its attribute updates go to (the attributes scenario)
                spec["conversationId"] = conversations[spec["id"]]
            specs.append(spec)
        elif kind == "notifications":
            specs.append(
                {
                    "id": f"nt-{i:04d}",
                    "platform": "genesys",
                    "kind": "notifications",
                    "agentId": f"agent-{i:04d}",
                }
            )
        else:
            specs.append(
                {
                    "id": f"cx-{i:04d}",
                    "platform": "cxone",
                    "kind": "agent-session",
                    "agentId": str(FIRST_CXONE_AGENT + i),
                    "stationPhoneNumber": f"555{i:04d}",
                }
            )
    return specs


def daemon_config(
    *,
    fleet: Fleet,
    scenario: Scenario,
    timing: Timing,
    genesys_urls: dict[str, str],
    cxone_urls: dict[str, str],
    credentials: dict[str, Path],
    taxonomy: str,
    seed: int,
    conversations: dict[str, str] | None = None,
    store: Path | None = None,
) -> Config:
    """The daemon's configuration for this run, validated like any config file."""
    early = timing.early_refresh_s if scenario.short_tokens else 300.0
    data: dict[str, Any] = {
        "platforms": {
            "genesys": {
                "loginUrl": genesys_urls["login"],
                "apiUrl": genesys_urls["api"],
                "webmessagingUrl": genesys_urls["webmessaging"],
                "streamingUrl": genesys_urls["streaming"],
                "clientId": GENESYS_CLIENT_ID,
                "clientSecretFile": str(credentials["genesys-client-secret"]),
                "deploymentId": DEPLOYMENT_ID,
            },
            "cxone": {
                "authUrl": cxone_urls["auth"],
                "clientId": CXONE_CLIENT_ID,
                "clientSecretFile": str(credentials["cxone-client-secret"]),
                "username": CXONE_USER,
                "passwordFile": str(credentials["cxone-password"]),
                "pollTimeout": timing.poll_timeout,
            },
        },
        "sessions": session_specs(fleet, conversations),
        "daemon": {"taxonomyVersion": taxonomy, "seed": seed},
        "reconnect": {"firstDelayMin": timing.first_delay[0], "firstDelayMax": timing.first_delay[1]},
        "circuit": {
            "window": timing.circuit_window_s,
            "openFor": timing.circuit_open_s,
            "probeTimeout": timing.probe_timeout_s,
        },
        "tokens": {"earlyRefresh": early, "refreshBeforeRetry": min(60.0, early)},
        "attributes": {"verifyAfter": timing.verify_after_s},
    }
    if store is not None:
        data["store"] = {"path": str(store)}
        # the store lives in the run's temporary directory: no later start takes anything over, so the
        # demo's end ends its sessions rather than handing them over
        data["handover"] = {"onStop": "end"}
    return parse_config(data, "demo")
