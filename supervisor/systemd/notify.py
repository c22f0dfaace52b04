"""``sd_notify`` in the project: one ``KEY=VALUE`` datagram to ``$NOTIFY_SOCKET`` (sd_notify(3)).

Why our own and not libsystemd or a package: the protocol is one ``AF_UNIX`` datagram of
newline-separated assignments, stable since systemd 209; the systemd maintainers advise services
to reimplement it instead of linking libsystemd (after the xz backdoor; docs/robustness.md, "systemd"), and
the PyPI ``sdnotify`` package has not changed since 2017. gunicorn's ``systemd.py`` does the same.

* ``$NOTIFY_SOCKET`` is a filesystem path (``/run/systemd/notify``) or, with a leading ``@``, a
  name in the abstract namespace (the ``@`` becomes a NUL byte). Anything else (the ``vsock:``
  form of systemd 254, a path longer than ``sun_path``) is not supported: notifications are off,
  and :attr:`Notifier.problem` says why in one line (``run`` prints it as a warning).
* Sending never blocks the event loop and never raises: the socket is non-blocking, and a full
  queue or an absent manager is counted (:attr:`Notifier.failures`) and logged at debug level,
  as gunicorn does. A notification is advice to the manager; the daemon's work comes first.
* A value never spans lines: ``STATUS=`` text is cut at the first line break (one live line).

Stdlib only (and :mod:`.environ`), so it sits on floor 3 beside the bus.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping

from supervisor.systemd.environ import shown

__all__ = ["Notifier", "encode", "monotonic_usec", "notify_address"]

_log = logging.getLogger("supervisor.systemd")


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds: what ``MONOTONIC_USEC=`` carries (sd_notify(3), systemd 253)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


#: sun_path holds 108 bytes (unix(7)); a path needs its NUL, an abstract name its leading NUL
_SUN_PATH = 108


def notify_address(value: str | None) -> str | bytes | None:
    """The ``sendto`` address for a ``$NOTIFY_SOCKET`` value; None when it is unset or unsupported."""
    return _address(value)[0]


def _address(value: str | None) -> tuple[str | bytes | None, str | None]:
    """(address, None), (None, why it is unsupported), or (None, None) when unset."""
    if not value:
        return None, None
    if value.startswith("@"):
        address: str | bytes = b"\0" + value[1:].encode()  # the abstract namespace (unix(7))
        size = len(address)
    elif value.startswith("/"):
        address, size = value, len(value.encode()) + 1
    else:
        # sd_notify() also takes "vsock:CID:PORT" since systemd 254 (a VM notifying its host); a
        # service under a manager gets a path
        return None, "only a path or an @abstract name is supported"
    if size > _SUN_PATH:
        return None, f"longer than a Unix socket address holds ({_SUN_PATH} bytes)"
    return address, None


def encode(fields: Mapping[str, str | int]) -> bytes:
    """``KEY=VALUE`` lines; a value is cut at its first line break so it cannot forge another key."""
    lines = []
    for key, value in fields.items():
        text = str(value)
        cut = min((i for i in (text.find("\n"), text.find("\r")) if i >= 0), default=len(text))
        lines.append(f"{key}={text[:cut]}")
    return ("\n".join(lines) + "\n").encode()


class Notifier:
    """Sends notifications to the service manager; every method is a no-op when not under one."""

    def __init__(self, address: str | bytes | None, *, clock: Callable[[], int] = monotonic_usec) -> None:
        self.address = address
        self._clock = clock
        self.sent = 0
        self.failures = 0
        self.problem: str | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Notifier:
        value = environ.get("NOTIFY_SOCKET")
        address, problem = _address(value)
        notifier = cls(address)
        if problem is not None:
            notifier.problem = (
                f"NOTIFY_SOCKET={shown(value or '', 64)}: {problem}; notifications are off "
                "(no READY=1, STATUS=, WATCHDOG=1)"
            )
        return notifier

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str | int) -> bool:
        """One datagram with ``fields`` (``READY=1`` as ``send(READY=1)``); False if not delivered."""
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)
                sock.sendto(encode(fields), self.address)
        except OSError as exc:
            self.failures += 1
            _log.debug("sd_notify to %r failed: %s", self.address, exc)
            return False
        self.sent += 1
        return True

    # -- the messages the daemon sends (sd_notify(3)) --------------------------------------------------

    def ready(self, status: str | None = None) -> bool:
        return self.send(READY=1, **({"STATUS": status} if status is not None else {}))

    def reloading(self, status: str | None = None) -> bool:
        # systemd >= 253 wants MONOTONIC_USEC with RELOADING=1 to match the reload to its request
        fields: dict[str, str | int] = {"RELOADING": 1, "MONOTONIC_USEC": self._clock()}
        if status is not None:
            fields["STATUS"] = status
        return self.send(**fields)

    def stopping(self, *, extend_usec: int | None = None, status: str | None = None) -> bool:
        fields: dict[str, str | int] = {"STOPPING": 1}
        if extend_usec is not None:
            fields["EXTEND_TIMEOUT_USEC"] = extend_usec
        if status is not None:
            fields["STATUS"] = status
        return self.send(**fields)

    def status(self, text: str) -> bool:
        return self.send(STATUS=text)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)
