"""One TLS context per trust configuration, shared by every HTTP client the daemon makes.

Building an ``ssl.SSLContext`` loads and parses the whole CA bundle (certifi's, or the file or
directory ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` names): tens of milliseconds each. The daemon holds
one HTTP client (connection pool) per 32 sessions of a platform (supervisor/runtime/wiring.py), and
each built its own context: ~220 clients for 7,000 sessions spent about 9 s of a restart there,
before the first handshake (docs/benchmarks.md, "Restart with a store"). A context is safe to share
between connections and pools (Python's ``ssl`` documentation: it holds configuration and the
trust store, a connection holds its own state), and httpx takes one as ``verify=``; so every
client gets the context of its trust configuration, made once. The pools stay one per client.

The trust configuration is what httpx's own default reads (``httpx.create_ssl_context`` with
``verify=True``): ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi's bundle. :meth:`forget`
drops what was made, so a reload that rebuilds a platform's clients reads the trust store again,
as it did when each client made its own.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping

import httpx

__all__ = ["TlsContexts"]


class TlsContexts:
    """The TLS contexts made so far, one per distinct trust configuration."""

    __slots__ = ("_environ", "_made", "made")

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        # httpx reads the process's environment (os.environ): the key must read the same
        self._environ: Mapping[str, str] = environ if environ is not None else os.environ
        self._made: dict[tuple[str, str], ssl.SSLContext] = {}
        #: contexts built since the daemon started (each is a CA bundle loaded)
        self.made = 0

    def context(self) -> ssl.SSLContext:
        """The context for the trust configuration in force now, made at its first use."""
        key = (self._environ.get("SSL_CERT_FILE", ""), self._environ.get("SSL_CERT_DIR", ""))
        context = self._made.get(key)
        if context is None:
            context = self._made[key] = httpx.create_ssl_context()
            self.made += 1
        return context

    def forget(self) -> None:
        """The next client reads the trust store anew (a reload that rebuilds clients)."""
        self._made.clear()
