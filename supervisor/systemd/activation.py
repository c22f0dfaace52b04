"""Socket activation: the listening sockets systemd hands over (``sd_listen_fds``, sd_listen_fds(3)).

systemd passes ``LISTEN_FDS=N`` descriptors starting at 3 (``SD_LISTEN_FDS_START``), names them
in ``LISTEN_FDNAMES`` (colon-separated, from each socket unit's ``FileDescriptorName=``) and
sets ``LISTEN_PID`` to the pid they are meant for: a variable inherited by a child of the
daemon is not an invitation to take descriptors 3.. (sd_listen_fds(3): "LISTEN_PID ... is
checked"), so without it, or naming another pid, nothing is taken.

The daemon's two sockets are named ``subscribe`` and ``control``
(systemd/session-supervisor-subscribe.socket and -control.socket). Taken descriptors get
``FD_CLOEXEC`` and the three variables are removed from the environment, as
``sd_listen_fds(unset_environment=1)`` does. Each must be a listening ``AF_UNIX`` stream socket
with a path (never the abstract namespace, which has no permissions: unix(7)); anything
else, an unknown or repeated name, or only one of the two is a :class:`ConfigError` naming it,
before any session starts. The socket API's peer check applies to handed-over sockets exactly
as to the ones the daemon binds itself.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path

from supervisor.errors import ConfigError
from supervisor.systemd.environ import PID_DIGITS, decimal, shown

__all__ = ["LISTEN_FDS_START", "NAMES", "activated_paths", "listen_fds"]

#: SD_LISTEN_FDS_START (sd-daemon.h): the first passed descriptor
LISTEN_FDS_START = 3
#: the descriptor names the daemon takes (FileDescriptorName= in the socket units)
NAMES = ("subscribe", "control")
_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def listen_fds(
    environ: MutableMapping[str, str],
    *,
    enabled: bool = True,
    pid: int | None = None,
    warn: Callable[[str], object] | None = None,
) -> dict[str, socket.socket]:
    """The sockets handed to this process by name; ``{}`` when not socket-activated.

    Removes the ``LISTEN_*`` variables from ``environ`` when they were meant for this process.
    ``enabled`` is ``sockets.enabled``: sockets handed to a daemon configured without the API
    are refused rather than silently served or silently ignored. A ``LISTEN_PID`` systemd never
    sends (not a decimal pid: ``²``, 400 digits) names nobody: ``warn`` gets one line, and the
    daemon binds its own sockets. A ``LISTEN_FDS`` that is not a count, with ``LISTEN_PID`` naming
    this process, is a hand-over gone wrong: a :class:`ConfigError`, like any other.
    """
    own = os.getpid() if pid is None else pid
    listen_pid_text = environ.get("LISTEN_PID", "").strip()
    if not listen_pid_text:
        return {}
    listen_pid = decimal(listen_pid_text, PID_DIGITS)
    if listen_pid is None:
        if warn is not None:
            warn(f"LISTEN_PID={shown(listen_pid_text)} is not a process id: socket activation is off")
        return {}
    if listen_pid != own:
        return {}
    count_text = environ.get("LISTEN_FDS", "").strip()
    names_text = environ.get("LISTEN_FDNAMES")
    for variable in _VARIABLES:
        environ.pop(variable, None)
    if not count_text:
        return {}
    # sd_listen_fds(3) reads an int; two are all the daemon takes, nine digits are more than any count
    count = decimal(count_text, 9)
    if count is None:
        raise ConfigError(f"socket activation: LISTEN_FDS={shown(count_text)} is not a count of descriptors")
    if count == 0:
        return {}
    names = names_text.split(":") if names_text is not None else []
    if len(names) != count:
        raise ConfigError(
            f"socket activation: LISTEN_FDS={count} but LISTEN_FDNAMES names {len(names)} "
            f"(set FileDescriptorName={' or '.join(NAMES)} in the socket units)"
        )
    taken: dict[str, socket.socket] = {}
    try:
        for offset, name in enumerate(names):
            fd = LISTEN_FDS_START + offset
            os.set_inheritable(fd, False)  # FD_CLOEXEC, as sd_listen_fds does
            if name not in NAMES:
                raise ConfigError(
                    f"socket activation: descriptor {fd} is named '{name}'; "
                    f"FileDescriptorName= must be {' or '.join(NAMES)}"
                )
            if name in taken:
                raise ConfigError(f"socket activation: two descriptors are named '{name}'")
            taken[name] = _listening_unix(fd, name)
        missing = [n for n in NAMES if n not in taken]
        if missing:
            raise ConfigError(
                f"socket activation: systemd passed {', '.join(sorted(taken))} but not {', '.join(missing)}; "
                "enable both socket units (or neither, and the daemon binds its sockets itself)"
            )
        if not enabled:
            raise ConfigError(
                "socket activation: systemd passed the socket API's sockets but sockets.enabled = false"
            )
    except BaseException:
        for sock in taken.values():
            sock.close()  # our copy only: systemd keeps its own for the next start
        raise
    return taken


def _listening_unix(fd: int, name: str) -> socket.socket:
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(
            f"socket activation: descriptor {fd} ('{name}') is not a socket ({exc.strerror})"
        ) from None
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        address = sock.getsockname()
    except OSError as exc:
        sock.detach()
        raise ConfigError(f"socket activation: descriptor {fd} ('{name}'): {exc.strerror}") from None
    problem = None
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        problem = "is not a Unix stream socket (ListenStream= with a path)"
    elif not listening:
        problem = "is not listening"
    elif not isinstance(address, str) or not address.startswith("/"):
        problem = "is not a filesystem socket (the abstract namespace has no permissions)"
    if problem is not None:
        sock.detach()
        raise ConfigError(f"socket activation: descriptor {fd} ('{name}') {problem}")
    sock.setblocking(False)
    return sock


def activated_paths(listeners: Mapping[str, socket.socket]) -> tuple[Path, Path] | None:
    """(subscribe, control) paths of handed-over sockets (checked by :func:`listen_fds`), or None."""
    if not listeners:
        return None
    subscribe, control = (Path(listeners[name].getsockname()) for name in NAMES)
    return subscribe, control
