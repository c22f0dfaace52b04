"""Base URLs in the configuration: what a connection needs (a scheme per key, a host, a port).

Checked on load so ``run --check`` refuses what ``run`` could not use (supervisor/config.py).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

__all__ = ["HTTP", "WS", "url_problem"]

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
