"""Configuration of the Genesys Cloud simulator (:class:`GenesysSimConfig`), a frozen msgspec Struct.

Values marked [I] in docs/platforms.md (inferred, undocumented) are knobs here. Defaults accept any
client id, secret and deployment id, so a newcomer can point a client at the simulator at once;
``clients`` / ``deployments`` restrict them. A TOML file with the same keys loads through
:func:`load_config`::

    token_ttl_s = 300
    deployments = ["3f1b..."]
    [clients]
    my-client-id = "my-secret"
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import msgspec

from supervisor.errors import SimulatorError
from supervisor.sim.activity import DEFAULT_CAPACITY
from supervisor.sim.limits import DEFAULT_READ_TIMEOUT_S, check_numbers
from supervisor.taxonomy.loader import LimitError, parse_toml, read_capped

#: the largest simulator config file read
MAX_CONFIG_BYTES = 1024 * 1024

__all__ = ["GenesysSimConfig", "load_config"]


class GenesysSimConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Knobs of the Genesys simulator. Every field has a working default.

    Attributes:
        clients: client id -> secret accepted by ``POST /oauth/token``; empty accepts any (§4).
        deployments: Web Messaging deployment ids accepted; empty accepts any (§1).
        token_ttl_s: ``expires_in`` of access tokens; Genesys allows 300..172800, default 86400 (§4).
        issue_refresh_tokens: also return a ``refresh_token`` for client credentials. Real
            client-credentials tokens carry none (§3); on by default so the refresh grant is usable.
        rate_limit: requests per token per window before 429 ``too.many.requests`` (§3: 300/min).
        rate_window_s: that window.
        heartbeat_interval_s: notifications heartbeat period (§2: 30 s).
        socket_closing_lead_s: time between ``v2.system.socket_closing`` and the close (§2: ~60 s).
        channel_ttl_s: a channel expires this long after its last subscribe (§2: 24 h).
        max_channels: channels per client before the oldest is evicted (§2: 20).
        max_topics: topics per channel (§2: 1000).
        wm_session_ttl_s: Web Messaging session lifetime (``durationSeconds``) [I].
        wm_disconnect_read_only: the agent's disconnect makes the guest session read-only and says
            so in the Presence Disconnect's ``metadata.readOnly`` ("true"); off: "false", the
            session stays writable (a deployment that only displays the status) [I, GMT].
        wm_full_session_response: answer a resumed ``configureSession`` with the full body a new
            session gets (``maxCustomDataBytes``, ``durationSeconds``, ...) instead of the vendor
            fixture's ``{"connected":true,"newSession":false}`` (GMT ``Response.kt``) [extension].
        wm_error_tracing_id: error replies carry the request's ``tracingId``; the vendor's error
            fixtures carry none (GMT ``Response.kt``) [extension].
        wm_clear_conversation: a guest's Presence ``Clear`` is honoured (``SessionClearedEvent``);
            off: 403 "Presence events Conversation Clear are not supported" (GMT ``Response.kt``).
        denied_topics: notification topic globs refused for missing permissions (``Rejected``
            with ``missingPermissions``, or 403 without ``ignoreErrors``) [I].
        wm_rate_limit / wm_rate_window_s: guest messages per session per window before 4029 [I].
        max_message_chars: onMessage text longer than this is 4011 [I].
        max_custom_data_bytes: customAttributes larger than this is 4013 (§1: 2048).
        wm_idle_timeout_s: close a Web Messaging connection with 1001 after this long without a
            frame from the client (None: never) [I, §1: "idle 300 s" suggested].
        wm_max_connection_s: close it with 1001 after this long open (None: never) [I].
        ws_ping_interval_s: server-side WebSocket pings (None: the client pings, §1) [I].
        ws_max_size: largest accepted WebSocket frame in bytes [I].
        compression: offer permessage-deflate (off: cheaper per connection) [I].
        read_timeout_s: an HTTP request's headers, then its body, must arrive within this long
            (else the connection is closed, or the request answered 408); idle keep-alive
            connections are closed after it too.
        activity_capacity: entries the activity log keeps (``GET {admin}/activity``; the oldest go
            first: docs/simulators.md, "Activity log").

    Every number must be finite and at most 10^9.
    """

    clients: dict[str, str] = msgspec.field(default_factory=dict)
    deployments: tuple[str, ...] = ()
    token_ttl_s: int = 86400
    issue_refresh_tokens: bool = True
    rate_limit: int = 300
    rate_window_s: float = 60.0
    heartbeat_interval_s: float = 30.0
    socket_closing_lead_s: float = 60.0
    channel_ttl_s: float = 86400.0
    max_channels: int = 20
    max_topics: int = 1000
    wm_session_ttl_s: int = 259200
    wm_disconnect_read_only: bool = True
    wm_clear_conversation: bool = True
    wm_full_session_response: bool = False
    wm_error_tracing_id: bool = False
    denied_topics: tuple[str, ...] = ()
    wm_rate_limit: int = 60
    wm_rate_window_s: float = 60.0
    max_message_chars: int = 4096
    max_custom_data_bytes: int = 2048
    wm_idle_timeout_s: float | None = None
    wm_max_connection_s: float | None = None
    ws_ping_interval_s: float | None = None
    ws_max_size: int = 256 * 1024
    compression: bool = False
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    activity_capacity: int = DEFAULT_CAPACITY

    def __post_init__(self) -> None:
        check_numbers(self)
        positive = {
            "token_ttl_s": self.token_ttl_s,
            "rate_limit": self.rate_limit,
            "rate_window_s": self.rate_window_s,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "socket_closing_lead_s": self.socket_closing_lead_s,
            "channel_ttl_s": self.channel_ttl_s,
            "max_channels": self.max_channels,
            "max_topics": self.max_topics,
            "wm_session_ttl_s": self.wm_session_ttl_s,
            "wm_rate_limit": self.wm_rate_limit,
            "wm_rate_window_s": self.wm_rate_window_s,
            "max_message_chars": self.max_message_chars,
            "max_custom_data_bytes": self.max_custom_data_bytes,
            "ws_max_size": self.ws_max_size,
            "read_timeout_s": self.read_timeout_s,
            "activity_capacity": self.activity_capacity,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("ws_ping_interval_s", "wm_idle_timeout_s", "wm_max_connection_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 or absent")


def config_from_dict(data: dict[str, Any], source: str = "config") -> GenesysSimConfig:
    """Build a config from a mapping; one-line :class:`SimulatorError` naming the key on error."""
    try:
        return msgspec.convert(data, GenesysSimConfig)
    except msgspec.ValidationError as exc:
        text, sep, where = str(exc).rpartition(" - at `")
        key = where.rstrip("`").removeprefix("$.").removeprefix("$") if sep else ""
        raise SimulatorError(f"{source}: {key or '(top level)'}: {text or exc}") from None
    except ValueError as exc:
        raise SimulatorError(f"{source}: {exc}") from None


def load_config(path: str | Path, **overrides: Any) -> GenesysSimConfig:
    """Load a TOML file (keys as :class:`GenesysSimConfig`), then apply non-None ``overrides``."""
    p = Path(path)
    try:
        data = parse_toml(read_capped(p, MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as exc:
        raise SimulatorError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except LimitError as exc:
        raise SimulatorError(f"{p}: {exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SimulatorError(f"{p}: invalid TOML: {exc}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    return config_from_dict(data, str(p))
