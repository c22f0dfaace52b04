"""The WebSocket bridge: the subscribe socket's stream for browser desktops and remote connectors (docs/bridge.md).

Its own process (``session-supervisor bridge``): one subscriber of the daemon's subscribe socket, fanned out
over WebSocket to clients that each hold a bearer token scoped to agents and sessions. The pure parts
(the tokens file and the scope, the rate limit of failed authentications, the routing of records, the
per-client outbox) import no I/O library; ``server.py`` holds the sockets.
"""
