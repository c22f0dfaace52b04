"""The daemon's configuration for the tests: TOML texts against the simulators' URLs, and files.

Every daemon a test starts, in-process (:mod:`tests.harness.in_process`) or as a child process
(:mod:`tests.harness.process`), reads a configuration made here: :func:`genesys_config` (Web
Messaging and notifications sessions, with the short durations the tests use), :func:`cxone_config`
(agent sessions), :func:`attributes_config` (sessions bound to conversations, the store and the
attribute queue), :func:`daemon_config` (a file for a daemon run as a process: its sockets, store and
sessions of both platforms); and its credential files (:class:`Credentials`), named by the
configuration relative to its directory.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Credentials",
    "attributes_config",
    "config_file",
    "cxone_config",
    "cxone_table",
    "daemon_config",
    "genesys_config",
    "short_dir",
    "sockets_table",
    "with_daemon",
]

PLACEHOLDER_SECRET = "not-a-real-secret"
PLACEHOLDER_ACCESS_KEY_SECRET = "not-a-real-access-key-secret"


@dataclass(frozen=True)
class Credentials:
    """The credential files the configurations name (``clientSecretFile``, ``passwordFile``), by
    their content; None: the file is not written (a test writes it itself)."""

    genesys: str | None = PLACEHOLDER_SECRET
    cxone: str | None = PLACEHOLDER_SECRET
    cxone_password: str | None = PLACEHOLDER_ACCESS_KEY_SECRET

    def write(self, directory: Path) -> None:
        files = {
            "genesys-secret": self.genesys,
            "cxone-secret": self.cxone,
            "cxone-password": self.cxone_password,
        }
        for name, value in files.items():
            if value is not None:
                (directory / name).write_text(value)


def config_file(
    directory: Path, text: str, credentials: Credentials | None = None, *, name: str = "supervisor.toml"
) -> Path:
    """``text`` written to ``directory/name``, with the credential files beside it; its path."""
    (credentials or Credentials()).write(directory)
    path = directory / name
    path.write_text(text)
    return path


def offline_config(directory: Path, *, taxonomy: str | None = None) -> Path:
    """One Genesys guest against example hosts, its client secret beside it: a configuration that
    ``run --check`` validates without reaching any platform; ``taxonomy`` pins its version."""
    (directory / "secret").write_text("not-a-real-secret")
    daemon = "[daemon]\n" + (f'taxonomyVersion = "{taxonomy}"\n' if taxonomy is not None else "")
    path = directory / "supervisor.toml"
    path.write_text(
        daemon + "[platforms.genesys]\n"
        'loginUrl = "https://login.example.com"\n'
        'apiUrl = "https://api.example.com"\n'
        'webmessagingUrl = "wss://webmessaging.example.com"\n'
        'clientId = "c"\n'
        'clientSecretFile = "secret"\n'
        "[[sessions]]\n"
        'id = "wm-1"\n'
        'platform = "genesys"\n'
        'kind = "webmessaging"\n'
        'deploymentId = "dep-1"\n'
    )
    return path


@contextlib.contextmanager
def short_dir(prefix: str = "ss-") -> Iterator[Path]:
    """A directory whose socket paths fit sun_path (108 bytes; pytest's tmp_path may be longer)."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir="/tmp") as directory:
        yield Path(directory)


def sockets_table(subscribe: Path, control: Path) -> str:
    return f'[sockets]\nsubscribe = "{subscribe}"\ncontrol = "{control}"\n'


def with_daemon(text: str, **keys: Any) -> str:
    """``text`` with extra keys in its ``[daemon]`` table (values as JSON, which TOML reads alike)."""
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    return text.replace("[daemon]\n", "[daemon]\n" + extra, 1)


def genesys_config(urls: Mapping[str, str], sessions: int, **overrides: Any) -> str:
    """``sessions`` Web Messaging sessions ``wm-i`` (and ``notifications`` notifications sessions
    ``nt-i``) against the Genesys simulator at ``urls``, with short reconnection delays."""
    lines = [
        "[daemon]",
        f"seed = {overrides.get('seed', 7)}",
        "shutdownGrace = 2.0",
        "[reconnect]",
        f"firstDelayMin = {overrides.get('first_min', 0.2)}",
        f"firstDelayMax = {overrides.get('first_max', 0.8)}",
        f"horizon = {overrides.get('horizon', 600.0)}",
        "[circuit]",
        f"openFor = {overrides.get('open_for', 1.0)}",
        f"probeTimeout = {overrides.get('probe_timeout', 2.0)}",
        "[tokens]",
        f"earlyRefresh = {overrides.get('early_refresh', 0.0)}",
        "[admission]",
        f"adaptive = {'true' if overrides.get('adaptive', True) else 'false'}",
        f"retryBudgetRatio = {overrides.get('retry_budget_ratio', 0.1)}",
        f"retryBudgetMinPerSecond = {overrides.get('retry_budget_min', 5.0)}",
        f"connectsInFlight = {overrides.get('connects_in_flight', 128)}",
        "[platforms.genesys]",
        f'loginUrl = "{urls["login"]}"',
        f'apiUrl = "{urls["api"]}"',
        f'webmessagingUrl = "{urls["webmessaging"]}"',
        f'streamingUrl = "{urls["streaming"]}"',
        'clientId = "demo-client"',
        'clientSecretFile = "genesys-secret"',
        'deploymentId = "dep-1"',
        f"sendCheckAfter = {overrides.get('send_check_after', 3.0)}",
        "[platforms.genesys.keepalive]",
        "echoInterval = 0",
        "pingInterval = 5.0",
        "pingTimeout = 5.0",
        f"openTimeout = {overrides.get('open_timeout', 10.0)}",
    ]
    for i in range(sessions):
        lines += [
            "[[sessions]]",
            f'id = "wm-{i}"',
            'platform = "genesys"',
            'kind = "webmessaging"',
            f'agentId = "a-{i}"',
        ]
        # a guest learns no conversation (docs/taxonomy.md): the configuration names the one it is on
        conversations = overrides.get("conversations", ())
        if i < len(conversations):
            lines.append(f'conversationId = "{conversations[i]}"')
    for i in range(overrides.get("notifications", 0)):
        lines += [
            "[[sessions]]",
            f'id = "nt-{i}"',
            'platform = "genesys"',
            'kind = "notifications"',
            f'agentId = "n-{i}"',
        ]
    return "\n".join(lines) + "\n"


def cxone_table(urls: Mapping[str, str], *, poll_timeout: int = 1, watchdog: float = 5.0) -> str:
    """The ``[platforms.cxone]`` table for the CXone simulator at ``urls`` (an access key's login)."""
    return (
        "[platforms.cxone]\n"
        f'authUrl = "{urls["auth"]}"\n'
        'clientId = "app@vendor"\n'
        'clientSecretFile = "cxone-secret"\n'
        'username = "agent1"\n'  # the access key id
        'passwordFile = "cxone-password"\n'  # the access key secret
        f"pollTimeout = {poll_timeout}\n"
        f"pollWatchdog = {watchdog}\n"
    )


def cxone_config(
    urls: Mapping[str, str],
    sessions: int,
    *,
    poll_timeout: int = 1,
    watchdog: float = 5.0,
    horizon: float = 600.0,
    open_for: float = 30.0,
) -> str:
    """``sessions`` agent sessions ``cx-i`` against the CXone simulator at ``urls``."""
    head = [
        "[daemon]",
        "seed = 3",
        "shutdownGrace = 2.0",
        "[circuit]",
        f"openFor = {open_for}",
        "[reconnect]",
        f"horizon = {horizon}",
        "firstDelayMin = 0.2",
        "firstDelayMax = 0.8",
    ]
    text = "\n".join(head) + "\n" + cxone_table(urls, poll_timeout=poll_timeout, watchdog=watchdog)
    for i in range(sessions):
        text += (
            f'[[sessions]]\nid = "cx-{i}"\nplatform = "cxone"\nkind = "agent-session"\n'
            f'stationId = "station-{i}"\nagentId = "{100001 + i}"\n'
        )
    return text


def attributes_config(
    urls: Mapping[str, str],
    conversations: Sequence[str],
    *,
    store: Path | None,
    queue_depth: int = 50,
    verify_after: float = 3.0,
    sensitive: tuple[str, ...] = (),
    synchronous: str = "normal",
    notifications: int = 0,
    request_timeout: float | None = None,
) -> str:
    """Web Messaging sessions ``wm-i`` bound to ``conversations[i]`` (the conversation a post-call
    middleware writes to), plus the ``[store]`` and ``[attributes]`` tables."""
    text = genesys_config(urls, 0, notifications=notifications)
    if request_timeout is not None:
        text = text.replace("[daemon]\n", f"[daemon]\nrequestTimeout = {request_timeout}\n", 1)
    for i, conversation in enumerate(conversations):
        text += (
            f'[[sessions]]\nid = "wm-{i}"\nplatform = "genesys"\nkind = "webmessaging"\n'
            f'agentId = "a-{i}"\nconversationId = "{conversation}"\n'
        )
    if store is not None:
        text += f'[store]\npath = "{store}"\nsynchronous = "{synchronous}"\n'
    keys = ", ".join(f'"{k}"' for k in sensitive)
    text += f"[attributes]\nqueueDepth = {queue_depth}\nverifyAfter = {verify_after}\nsensitive = [{keys}]\n"
    return text


def daemon_config(
    genesys_urls: Mapping[str, str],
    directory: Path,
    sessions: Sequence[tuple[str, str | None]],
    *,
    store: Path | None = None,
    verify_after: float = 0.3,
    queue_depth: int = 50,
    synchronous: str = "normal",
    extra: str = "",
    cxone: Mapping[str, str] | None = None,
    cxone_sessions: Sequence[tuple[str, str]] = (),
    credentials: Credentials | None = None,
    genesys: Mapping[str, Any] | None = None,
) -> Path:
    """A config file for a daemon run as a process, with the sockets in ``directory/sockets`` (short
    enough for sun_path), Web Messaging sessions ``(id, conversation id)`` and CXone sessions
    ``(id, agent id)`` when ``cxone`` (the CXone simulator's URLs) is given; its credential files
    (``credentials``, by default placeholders: CXone's only with ``cxone``); ``genesys``: overrides of
    :func:`genesys_config` (``open_timeout``, ``send_check_after``, ...)."""
    sockets = directory / "sockets"
    sockets.mkdir(exist_ok=True)
    text = sockets_table(sockets / "subscribe.sock", sockets / "control.sock")
    if store is not None:
        text += f'[store]\npath = "{store}"\nsynchronous = "{synchronous}"\n'
    text += f"[attributes]\nqueueDepth = {queue_depth}\nverifyAfter = {verify_after}\n{extra}"
    text += genesys_config(genesys_urls, 0, **(genesys or {}))
    if cxone is not None:
        text += cxone_table(cxone)
    for session_id, conversation in sessions:
        text += f'[[sessions]]\nid = "{session_id}"\nplatform = "genesys"\nkind = "webmessaging"\n'
        if conversation is not None:
            text += f'conversationId = "{conversation}"\n'
    for session_id, agent in cxone_sessions:
        text += (
            f'[[sessions]]\nid = "{session_id}"\nplatform = "cxone"\nkind = "agent-session"\n'
            f'agentId = "{agent}"\nstationId = "station-{agent}"\n'
        )
    if credentials is None:
        credentials = Credentials() if cxone is not None else Credentials(cxone=None, cxone_password=None)
    return config_file(directory, text, credentials)
