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
with a path (never the abstract namespace, which has no permissions: reliability.md §2); anything
else, an unknown or repeated name, or only one of the two is a :class:`ConfigError` naming it,
before any session starts. The socket API's peer check applies to handed-over sockets exactly
as to the ones the daemon binds itself.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from supervisor.errors import ConfigError

__all__ = ["LISTEN_FDS_START", "NAMES", "activated_paths", "listen_fds"]

#: SD_LISTEN_FDS_START (sd-daemon.h): the first passed descriptor
LISTEN_FDS_START = 3
#: the descriptor names the daemon takes (FileDescriptorName= in the socket units)
NAMES = ("subscribe", "control")
_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def listen_fds(
    environ: MutableMapping[str, str], *, enabled: bool = True, pid: int | None = None
) -> dict[str, socket.socket]:
    """The sockets handed to this process by name; ``{}`` when not socket-activated.

    Removes the ``LISTEN_*`` variables from ``environ`` when they were meant for this process.
    ``enabled`` is ``sockets.enabled``: sockets handed to a daemon configured without the API
    are refused rather than silently served or silently ignored.
    """
    own = os.getpid() if pid is None else pid
    listen_pid = environ.get("LISTEN_PID", "").strip()
    if not listen_pid or listen_pid != str(own):
        return {}
    count_text = environ.get("LISTEN_FDS", "").strip()
    names_text = environ.get("LISTEN_FDNAMES")
    for variable in _VARIABLES:
        environ.pop(variable, None)
    if not count_text.isdigit() or int(count_text) == 0:
        return {}
    count = int(count_text)
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
