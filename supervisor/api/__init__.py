"""The local socket API (docs/socket-api.md): a read-only subscribe socket and a stricter control socket.

Floors (docs/runtime.md): :mod:`supervisor.api.protocol`, :mod:`supervisor.api.events` and
:mod:`supervisor.api.outbox` are pure (floor 3: framing, messages, the per-subscriber
conflating buffer); the rest does I/O and sits with the runtime (floor 7): the state board
that follows the bus, the listeners and peer checks, the two services, and the client the
``watch`` and ``ctl`` commands use.
"""
