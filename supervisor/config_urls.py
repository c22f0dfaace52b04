"""Base URLs in the configuration: what a connection needs (a scheme per key, a host, a port).

Checked on load so ``run --check`` refuses what ``run`` could not use (supervisor/config.py).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["DEFAULT_SSLMODE", "HTTP", "WS", "needs_tls", "redacted", "store_url_problem", "url_problem"]

HTTP = ("http", "https")
WS = ("ws", "wss")
# RFC 1123 host name labels (after IDNA encoding)
_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def url_problem(url: str, schemes: tuple[str, ...]) -> str | None:
    """Why ``url`` cannot be the base URL of a connection, or None."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError: not an integer in 0-65535
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme.lower() not in schemes:
        return f"the scheme must be {' or '.join(schemes)}, got '{parts.scheme or url[:40]}'"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (name them in the *File keys)"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "must not have a query or a fragment (it is a base URL)"
    if port == 0:
        return "port 0 cannot be connected to"
    host = parts.hostname
    if not host:
        return "has no host"
    return _host_problem(host)


def _host_problem(host: str) -> str | None:
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if re.fullmatch(r"[0-9.]+", host):
        return f"invalid host '{host}' (not an IPv4 address)"
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return f"invalid host '{host[:60]}'"
    labels = ascii_host.removesuffix(".").split(".")
    if len(ascii_host) > 253 or not all(_LABEL.match(label) for label in labels):
        return f"invalid host '{host[:60]}'"
    return None


# -- [store] url: a PostgreSQL connection URI ----------------------------------------------------------
# What a ``[store] url`` may say (docs/store.md, "PostgreSQL"), checked without a database library.
#
# * ``postgresql://`` (or ``postgres://``), a libpq connection URI
#   (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS);
# * **no password in it**: the password comes from ``passwordFile`` (a URL is shown in status lines,
#   logs and error messages; a file is the owner's alone);
# * **TLS for every host that is not a Unix socket**: ``sslmode`` unset becomes ``verify-full`` (the
#   server's certificate is checked against the system's or ``sslrootcert``'s authorities, and its name
#   against the host); ``verify-ca`` is accepted; ``disable``, ``allow``, ``prefer`` and ``require``
#   are refused, since none of them checks whom the daemon talks to, and the store holds resume
#   credentials. A host that is a directory (``/var/run/postgresql``, or none: libpq's default socket)
#   is a Unix socket, where the kernel says who is at the other end.

SCHEMES: Final = ("postgresql", "postgres")
#: the sslmodes that check the server: the only ones allowed for a TCP host
TLS_MODES: Final = ("verify-full", "verify-ca")
DEFAULT_SSLMODE: Final = "verify-full"


def _hosts(url: str) -> list[str]:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    hosts = []
    for item in netloc.split(","):
        # [v6]:port or host:port
        host = item[1:].partition("]")[0] if item.startswith("[") else item.partition(":")[0]
        hosts.append(unquote(host))
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in ("host", "hostaddr"):
            hosts.extend(value.split(","))
    return hosts


def _tcp(host: str) -> bool:
    return bool(host) and not host.startswith(("/", "@"))


def needs_tls(url: str) -> bool:
    """Whether the URL names any host reached over TCP (not a Unix socket)."""
    return any(_tcp(h) for h in _hosts(url))


def store_url_problem(url: str) -> str | None:
    """What is wrong with a ``[store] url``, in one line, or None (see below)."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in SCHEMES:
        return f"expected a postgresql:// URL, got scheme {parts.scheme[:20]!r}"
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
    if ":" in userinfo or any(name == "password" for name, _ in query):
        return "the URL holds a password: put it in passwordFile instead (a URL is shown in logs and status)"
    params = dict(query)
    mode = params.get("sslmode")
    if needs_tls(url) and mode is not None and mode not in TLS_MODES:
        tcp = next(h for h in _hosts(url) if _tcp(h))
        return (
            f"sslmode={mode[:20]} does not check the server's certificate; a host reached over TCP "
            f"({tcp[:64]}) needs sslmode=verify-full (the default) or verify-ca"
        )
    return None


def redacted(url: str) -> str:
    """``url`` with any password taken out (a URL the configuration refused may hold one): for errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unreadable URL)"
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    netloc = (userinfo.partition(":")[0] + ":***@" if ":" in userinfo else userinfo + at) + hostinfo
    query = "&".join(
        f"{name}=***" if name == "password" else (f"{name}={value}" if value else name)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return parts._replace(netloc=netloc, query=query).geturl()
