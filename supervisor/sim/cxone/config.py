"""Configuration of the CXone fake (:class:`CxoneSimConfig`), a frozen msgspec Struct.

Defaults accept any client, secret and user (docs/simulators.md: by default the simulators accept
any client id, secret, user"); setting a tuple or a value restricts them.
"""

from __future__ import annotations

import enum
import tomllib
from pathlib import Path

import msgspec

from supervisor.errors import ConfigError
from supervisor.sim.activity import DEFAULT_CAPACITY
from supervisor.sim.limits import DEFAULT_READ_TIMEOUT_S, check_numbers
from supervisor.taxonomy.loader import LimitError, parse_toml, read_capped

#: the largest simulator config file read
MAX_CONFIG_BYTES = 1024 * 1024


class ErrorBody(enum.StrEnum):
    """Body of 401 answers on API routes: docs/platforms.md, "Errors, event shapes and limits" says both forms occur [I]."""

    JSON = "json"  # {"error":"invalid_token","error_description":...}
    EMPTY = "empty"  # status line only


class CxoneSimConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Knobs of the CXone fake. Every field has a working default.

    Attributes:
        token_ttl_s: ``expires_in`` of issued access tokens (docs/platforms.md, "Errors, event shapes and limits": "expire after an hour").
        token_early_expiry_s: tokens stop working this many seconds before the ``expires_in`` (and
            ``exp``) they were issued with: a platform whose clock runs ahead of ours, or that ends a
            token a little early (docs/taxonomy.md, "The 401 rule"). 0 (the default): exactly when announced.
        client_ids: accepted client ids (``app@vendor`` in legacy Basic auth, the OpenID client id at
            ``/auth/token``, ``{clientId}`` of the v1 exchange's ``{clientId}@cxone``); empty accepts any.
        client_secret: when set, the ``/auth/token`` client secret must equal it.
        users: accepted usernames for the password grant (CXone access key ids); empty accepts any.
        password: when set, the password grant's ``password`` (the access key secret) must equal it.
        max_age_s: when set, every get-next-event answer carries ``Cache-Control: max-age=N``
            (RFC 9111 §5.2.2.1; a re-poll hint, docs/platforms.md, "HTTP semantics" [I]).
        inactivity_timeout_s: session inactivity timeout when the start request gives none.
        api_versions: accepted ``v{N}.0`` major versions; empty accepts any.
        max_poll_timeout_s: upper bound of ``get-next-event?timeout=`` (docs/platforms.md, "NICE CXone": 0–60).
        bus_no: business unit number put in tokens and events.
        team_id: ``team_id`` put in tokens.
        first_agent_id: agent ids are given to new usernames from this number upwards.
        auth_error_body: body of 401s on API routes (``json`` or ``empty``).
        scope: ``scope`` of issued tokens when the request names none.
        read_timeout_s: an HTTP request's headers, then its body, must arrive within this long
            (else the connection is closed, or the request answered 408); idle keep-alive
            connections are closed after it too.
        ended_poll_status: what a poll after the delivered ``AgentSessionEnd`` answers: 409
            (default), 404 or 400. No vendor source shows it (NICE's SDK never sends that poll) [I].
        activity_capacity: entries the activity log keeps (``GET {admin}/activity``; the oldest go
            first: docs/simulators.md, "Activity log").

    Every number must be finite and at most 10^9.
    """

    token_ttl_s: int = 3600
    token_early_expiry_s: float = 0.0
    client_ids: tuple[str, ...] = ()
    client_secret: str | None = None
    users: tuple[str, ...] = ()
    password: str | None = None
    max_age_s: int | None = None
    inactivity_timeout_s: float = 300.0
    api_versions: tuple[int, ...] = ()
    max_poll_timeout_s: int = 60
    bus_no: int = 4600001
    team_id: int = 2000
    first_agent_id: int = 100001
    auth_error_body: ErrorBody = ErrorBody.JSON
    scope: str = "RealTimeApi AdminApi AgentApi AuthenticationApi PatronApi ReportingApi"
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    ended_poll_status: int = 409
    activity_capacity: int = DEFAULT_CAPACITY

    def __post_init__(self) -> None:
        check_numbers(self)
        if self.ended_poll_status not in (400, 404, 409):
            raise ValueError("ended_poll_status must be 400, 404 or 409")
        if self.read_timeout_s <= 0:
            raise ValueError("read_timeout_s must be > 0")
        if self.activity_capacity <= 0:
            raise ValueError("activity_capacity must be > 0")
        if self.token_ttl_s <= 0:
            raise ValueError("token_ttl_s must be positive")
        if not 0 <= self.token_early_expiry_s < self.token_ttl_s:
            raise ValueError("token_early_expiry_s must be >= 0 and less than token_ttl_s")
        if self.max_age_s is not None and self.max_age_s < 0:
            raise ValueError("max_age_s must be >= 0")
        if not 0 <= self.max_poll_timeout_s <= 3600:
            raise ValueError("max_poll_timeout_s must be within 0..3600")
        if self.inactivity_timeout_s < 0:
            raise ValueError("inactivity_timeout_s must be >= 0 (0 disables it)")


def load_config(path: str | Path) -> CxoneSimConfig:
    """A :class:`CxoneSimConfig` from a TOML file (keys as the field names; unknown keys refused).

    Raises:
        ConfigError: unreadable file or invalid content; one line naming the file and the key.
    """
    where = str(path)
    try:
        raw = parse_toml(read_capped(Path(path), MAX_CONFIG_BYTES).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except LimitError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: invalid TOML ({exc})") from None
    try:
        return msgspec.convert(raw, CxoneSimConfig)
    except msgspec.ValidationError as exc:
        # msgspec: "Expected `int`, got `str` - at `$.token_ttl_s`"
        text, sep, at = str(exc).rpartition(" - at `")
        detail = f"{at.rstrip('`').removeprefix('$.')}: {text}" if sep else str(exc)
        raise ConfigError(f"{where}: {detail}") from None
