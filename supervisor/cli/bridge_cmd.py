"""``session-supervisor bridge``: the subscribe socket's stream over WebSocket, for browser desktops."""

from __future__ import annotations

import signal
import ssl
import sys
from pathlib import Path

import anyio
import click

from supervisor.cli.socket_option import resolve_socket, socket_option
from supervisor.errors import ConfigError

_EPILOG = """\b
Security (docs/bridge.md):
  - it listens on loopback unless --listen says otherwise; a non-loopback address needs --cert and
    --key (TLS), or --allow-plaintext when a TLS proxy on this host terminates TLS for it;
  - the tokens file holds SHA-256 digests of the tokens, one JSON object a line:
      {"sha256": "<hex digest>", "agents": ["a-1"], "sessions": ["wm-9"]}
    a token sees the sessions of its agents and the sessions it names ("platform": true adds the
    platform stream, customer data); make a digest with:
      printf %s "$TOKEN" | sha256sum
  - a client authenticates with "Authorization: Bearer TOKEN" on the upgrade, or (a browser cannot
    set that header) with a first message {"token": "TOKEN"} (a platform token may add "since", as on
    the subscribe socket); failures are rate-limited per address;
  - a browser (its upgrade carries Origin) is refused until --origin names its page's origin;
  - SIGHUP re-reads the tokens file (a bad file keeps the current tokens); SIGTERM stops.

\b
Example:
  session-supervisor bridge --socket /run/session-supervisor/subscribe.sock \\
      --listen 127.0.0.1:8765 --tokens /etc/session-supervisor/bridge-tokens \\
      --origin https://desktop.example.com
Each line it prints is one JSON object (BRIDGE_LISTENING first, with the address it serves).
Exit codes: 0 stopped by SIGTERM/SIGINT, 1 a failure (one line), 2 bad usage."""


@click.command(epilog=_EPILOG)
@socket_option("subscribe")
@click.option(
    "--listen",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve WebSocket ([v6]:PORT for IPv6; port 0: a free port, printed in BRIDGE_LISTENING).",
)
@click.option(
    "--tokens",
    "tokens_path",
    required=True,
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The tokens file: one JSON object a line, {sha256, agents, sessions} (see below).",
)
@click.option(
    "--cert", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path), help="TLS certificate (PEM)."
)
@click.option(
    "--key", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path), help="TLS private key (PEM)."
)
@click.option(
    "--origin",
    "origins",
    multiple=True,
    metavar="URL",
    help="A page origin allowed to connect, e.g. https://desktop.example.com (repeatable; none by default: "
    "browsers are refused until one is given).",
)
@click.option(
    "--allow-plaintext",
    is_flag=True,
    help="Serve plain ws:// on a non-loopback address (only behind a TLS proxy on this host).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 100_000),
    default=128,
    show_default=True,
    help="Clients at once.",
)
@click.option(
    "--client-buffer-bytes",
    type=click.IntRange(4096, 1 << 30),
    default=1 << 20,
    show_default=True,
    help="A client's pending messages past this: it is told `lagged` and gets a fresh snapshot.",
)
@click.option(
    "--lagged-disconnect-after",
    type=click.FloatRange(0.1, 3600),
    default=10.0,
    show_default=True,
    help="Seconds a client may stay over its buffer before it is disconnected.",
)
@click.option(
    "--handshake-timeout",
    type=click.FloatRange(0.1, 600),
    default=5.0,
    show_default=True,
    help="Seconds a client has to send its token (when it gave no Authorization header).",
)
def bridge(
    socket_path: Path | None,
    listen: str,
    tokens_path: Path,
    cert: Path | None,
    key: Path | None,
    origins: tuple[str, ...],
    allow_plaintext: bool,
    max_connections: int,
    client_buffer_bytes: int,
    lagged_disconnect_after: float,
    handshake_timeout: float,
) -> None:
    """Serve the daemon's session stream over WebSocket to browser desktops, each token its own agents' sessions.

    The bridge is a subscriber of the daemon's subscribe socket, in its own process. Its clients get the
    socket's records unchanged (snapshot, delta, event with the terminations and their action, and, for
    tokens allowed it, platform and gap), one JSON object per WebSocket message, only for the sessions
    their token's scope allows.
    """
    from supervisor.bridge.server import Bridge, BridgeSettings, load_tokens, parse_listen

    where = parse_listen(listen)
    if (cert is None) != (key is None):
        raise click.UsageError("--cert and --key go together")
    if cert is None and not where.loopback and not allow_plaintext:
        raise ConfigError(
            f"--listen {listen}: not a loopback address: give --cert and --key (TLS), or --allow-plaintext "
            "behind a TLS proxy on this host"
        )
    for origin in origins:
        if "://" not in origin or origin.endswith("/"):
            raise click.BadParameter(
                f"{origin!r}: an origin is SCHEME://HOST[:PORT], no path", param_hint="--origin"
            )
    tls = _tls(cert, key) if cert is not None and key is not None else None
    tokens = load_tokens(tokens_path)
    settings = BridgeSettings(
        socket=resolve_socket(socket_path, "subscribe"),
        listen=where,
        tokens=tokens_path,
        origins=frozenset(origins),
        tls=tls,
        max_connections=max_connections,
        client_buffer_bytes=client_buffer_bytes,
        lagged_disconnect_after=lagged_disconnect_after,
        handshake_timeout=handshake_timeout,
    )
    bridge = Bridge(settings, tokens)

    async def main() -> None:
        from supervisor.runtime.signals import STOPS, receiving

        with receiving() as signals:
            if signals.take_stop(STOPS) is not None:
                return
            try:
                server = await bridge.start()
            except OSError as exc:
                raise ConfigError(f"--listen {listen}: cannot serve: {exc.strerror or exc}") from None
            scheme = "wss" if tls is not None else "ws"
            bridge.log(
                "BRIDGE_LISTENING",
                url=f"{scheme}://{_host(where.host)}:{bridge.port}",
                socket=str(settings.socket),
                tokens=len(tokens),
                origins=sorted(origins),
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(bridge.follow)
                async for received in signals:
                    if received == signal.SIGHUP:
                        bridge.reload()
                    elif received in STOPS:
                        break
                tg.cancel_scope.cancel()
            server.close()
            with anyio.move_on_after(settings.handshake_timeout):
                await server.wait_closed()
            bridge.log("BRIDGE_STOPPED", **bridge.stats())

    try:
        anyio.run(main, backend="asyncio")
    except OSError as exc:
        raise click.ClickException(f"bridge: {exc.strerror or exc}") from None
    sys.stdout.flush()


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"--cert {cert} / --key {key}: cannot load: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return context
