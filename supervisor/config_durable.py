"""The ``[store]``, ``[fleet]``, ``[handover]`` and ``[attributes]`` tables of the configuration (docs/configuration.md).

Kept beside :mod:`supervisor.config`, which includes them in :class:`~supervisor.config.Config`:

```toml
[store]
path = "/var/lib/session-supervisor/store.sqlite3"   # default: $STATE_DIRECTORY/store.sqlite3
synchronous = "full"                                 # "full" (survives power loss) or "normal"

[fleet]                  # with [store] url: this daemon is a member of the fleet on that store
member = "edge-1"        # default: the boot id and 8 hex of the configuration file's path's digest
host = "edge-1.example.com"   # what a client asking another member for a session is told
leaseSeconds = 10        # a shard's lease; a member silent this long loses its shards to the others
renewSeconds = 2         # how often a member renews its leases (and takes or gives back shards)

[handover]
onStop = "handover"      # a stop with a store leaves the sessions alive for the next start; "end" ends them
maxAgeSeconds = 240      # a session left longer ago than this is ended at start, not taken over

[attributes]
queueDepth = 50          # seed edge case 2: a request queue with a maximum depth of 50
verifyAfter = 3.0        # seed edge case 2: poll the conversation after a 3-second delay
sensitive = ["ssn"]      # keys whose values never appear in events, logs or answers
```
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Final, Literal

import msgspec

from supervisor.config_urls import store_url_problem
from supervisor.errors import ConfigError

__all__ = [
    "DEFAULT_HANDOVER_MAX_AGE_S",
    "FLEET_MEMBER_PATTERN",
    "ON_STOP_ENV",
    "AttributesConfig",
    "FleetConfig",
    "HandoverConfig",
    "StopAction",
    "StoreConfig",
    "stop_action",
]

#: overrides ``handover.onStop`` (a systemd drop-in's ``Environment=``: docs/systemd.md, "Stopping")
ON_STOP_ENV = "SESSION_SUPERVISOR_ON_STOP"

#: the platforms' inactivity window minus a margin. CXone: an agent session with no request for its
#: inactivity timeout ends; the client may set it (``inactivityTimeout``, NICE core-sdk 26.2.1
#: ``start-session-request.d.ts``) and no vendor source states the platform's default: 300 s is
#: inferred [I] (the CXone simulator's ``inactivity_timeout_s``). Less a 60 s margin for the time a
#: restart and the first poll take. A guest session lives far longer (its ``durationSeconds``, the
#: Genesys simulator's ``wm_session_ttl_s``), a channel 24 h: the shortest window decides
DEFAULT_HANDOVER_MAX_AGE_S = 240.0

_Key = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class StoreConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """Where the durable store lives. Unset ``path``: ``$STATE_DIRECTORY/store.sqlite3`` (systemd's
    ``StateDirectory=``); with neither, the daemon keeps nothing across restarts and refuses
    attribute updates (it cannot acknowledge what it cannot persist)."""

    path: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # "full": the WAL is synced at every commit (an acknowledged update survives power loss);
    # "normal": it survives kill -9 but not an OS crash (SQLite "PRAGMA synchronous"; docs/store.md)
    synchronous: Literal["full", "normal"] = "full"
    # the store in PostgreSQL instead of a file (docs/store.md, "PostgreSQL"): a postgresql:// URL with
    # no password in it; TLS (sslmode=verify-full by default) for any host that is not a Unix socket
    url: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None
    # the role's password, read like the platforms' credential files (beside the configuration, or
    # in $CREDENTIALS_DIRECTORY)
    password_file: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | None = None

    def __post_init__(self) -> None:
        # msgspec reports a ValueError raised here with the table's location
        if self.url is not None:
            if self.path is not None:
                raise ValueError("path and url name two stores: give one")
            problem = store_url_problem(self.url)
            if problem is not None:
                raise ValueError(f"url: {problem}")
        elif self.password_file is not None:
            raise ValueError("passwordFile is for a PostgreSQL store: give url too")


# ``[fleet] localAddress``: an IPv4 or IPv6 literal (what a socket binds before it connects)
LOCAL_ADDRESS = r"^(?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*)$"
#: what a fleet member id may be: the default's boot id, "/" and hex digits, or a name of the operator's
FLEET_MEMBER_PATTERN: Final = r"^[A-Za-z0-9._:@/-]{1,200}$"


class FleetConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``[fleet]``: a daemon on a PostgreSQL store (``[store] url``) is a member of the fleet sharing
    it (docs/runtime.md, "The fleet"); with a file store the table is not used."""

    # the member's id in fleet_members and shard_leases; unset: the boot id, "/", and 8 hex digits of
    # the SHA-256 of the configuration file's absolute path (supervisor/fleet/identity.py)
    member: Annotated[str, msgspec.Meta(pattern=FLEET_MEMBER_PATTERN)] | None = None
    # what NotOwner tells a client of a session another member runs; unset: the host name
    host: Annotated[str, msgspec.Meta(min_length=1, max_length=255)] | None = None
    # a shard's lease on the database's clock: a member silent this long loses its shards
    lease_seconds: Annotated[float, msgspec.Meta(ge=1.0, le=600.0)] = 10.0
    # one renewal (and the acquisitions and releases it decides) every renewSeconds
    renew_seconds: Annotated[float, msgspec.Meta(ge=0.1, le=300.0)] = 2.0
    # a stall of the event loop longer than this fences every shard until the leases are renewed
    # again (the loop's lateness is measured on CLOCK_BOOTTIME: a stopped process sees it too;
    # docs/runtime.md, "The fence at the write")
    loop_lag_seconds: Annotated[float, msgspec.Meta(gt=0.0, le=60.0)] = 2.0
    # the source address of every outgoing connection (HTTP and WebSocket); none: the kernel's choice
    local_address: Annotated[str, msgspec.Meta(pattern=LOCAL_ADDRESS)] | None = None

    def __post_init__(self) -> None:
        # two renewals fit in a lease's local window (leaseSeconds less its fence margin: 4 s, or
        # 40 % of a lease under 10 s; supervisor/fleet/leases.py), so one lost renewal loses nothing
        window = self.lease_seconds - min(4.0, self.lease_seconds * 0.4)
        if self.renew_seconds * 2 > window:
            raise ValueError(
                f"renewSeconds {self.renew_seconds:g} is too long for leaseSeconds {self.lease_seconds:g}: "
                f"two renewals must fit in {window:g} s (the lease less its fence margin)"
            )


class StopAction(enum.StrEnum):
    """What a stop (SIGTERM, ``ctl drain``) does to the sessions when a store is configured."""

    # left alive on the platform, taken over by the next start (docs/runtime.md, "Lifecycle")
    HANDOVER = "handover"
    # ended on the platform: guests closeSession, CXone agent sessions DELETE
    END = "end"


class HandoverConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    """``[handover]``: what a stop leaves for the next start. Without a store a stop always ends the
    sessions (nothing would remember them)."""

    on_stop: StopAction = StopAction.HANDOVER
    # a session left longer ago than this is ended at start rather than taken over: the platform
    # has (or is about to have) ended it for inactivity
    max_age_seconds: Annotated[float, msgspec.Meta(gt=0.0, le=86_400.0)] = DEFAULT_HANDOVER_MAX_AGE_S


def stop_action(handover: HandoverConfig, environ: Mapping[str, str]) -> StopAction:
    """``handover.onStop``, or ``$SESSION_SUPERVISOR_ON_STOP`` when set (a unit's drop-in); raises
    ConfigError naming the variable for a value that is neither."""
    raw = environ.get(ON_STOP_ENV, "")
    if not raw:
        return handover.on_stop
    try:
        return StopAction(raw)
    except ValueError:
        choices = " or ".join(repr(a.value) for a in StopAction)
        raise ConfigError(f"${ON_STOP_ENV}: expected {choices}, got {raw[:64]!r}") from None


class AttributesConfig(msgspec.Struct, frozen=True, rename="camel", forbid_unknown_fields=True):
    queue_depth: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 50
    verify_after: Annotated[float, msgspec.Meta(ge=0.0, le=3600.0)] = 3.0
    sensitive: list[_Key] = msgspec.field(default_factory=list)
    # intake resumes once the queue drained to this depth; unset: half of queueDepth
    resume_at: Annotated[int, msgspec.Meta(ge=0, le=100_000)] | None = None
    # re-sends after a verified mismatch (only when the server still holds the value from before our write)
    repair_budget: Annotated[int, msgspec.Meta(ge=0, le=100)] = 2

    def __post_init__(self) -> None:
        if self.resume_at is not None and self.resume_at >= self.queue_depth:
            raise ValueError("resumeAt must be below queueDepth")
