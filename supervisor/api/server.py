"""The socket API of one daemon: the state board, the fan-out and the two socket services.

The composition root (supervisor/runtime/assembly.py) builds it before the lifecycle runs (its
board must be on the bus before the first session moves), with what it serves: the session table
to read, the control operations, the circuits, the taxonomy switch, the store's desired sessions
and attribute service (supervisor/runtime/sessions.py). The lifecycle binds it (:meth:`bind`)
before any session starts and starts :attr:`SocketApi.services`::

    api = SocketApi(sessions, supervisor, config.sockets, bus=bus, clock=clock, circuits=..., ...)
    await run_daemon(supervisor, grace_s=..., bind=[api], services=api.services, stop=stop)

Its one service binds both sockets, publishes ``SOCKET_API_LISTENING`` and only then reports
started, so readiness (``DAEMON_STARTED``, ``READY=1`` later) means the sockets answer. When
the daemon stops, the service is cancelled: each subscriber gets a last ``end`` reply if its
socket takes it, every connection is closed and both socket files are removed (if still ours).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from supervisor.api.board import StateBoard
from supervisor.api.connection import UnixService
from supervisor.api.control import ControlService, Reload
from supervisor.api.events import SocketApiListening
from supervisor.api.fanout import Hub
from supervisor.api.listen import platform_policy, policies, resolve_group, socket_paths
from supervisor.api.platform_events import PlatformEvents
from supervisor.api.subscribe import SubscribeService
from supervisor.attributes import AttributeService
from supervisor.bus import EventBus
from supervisor.clock import Clock, iso_utc
from supervisor.config import SocketsConfig
from supervisor.fleet.desired import FleetDesk
from supervisor.fleet.view import FleetView
from supervisor.runtime.main import Service
from supervisor.runtime.sessions import (
    CircuitControl,
    CircuitReader,
    DesiredSessions,
    SessionControl,
    SessionMessaging,
    SessionOwners,
    SessionReader,
    TaxonomySwitch,
)

__all__ = ["SocketApi"]


class SocketApi:
    """Board + hub + the subscribe and control services (see the module docstring)."""

    def __init__(
        self,
        sessions: SessionReader,
        operations: SessionControl,
        config: SocketsConfig,
        *,
        bus: EventBus,
        clock: Clock,
        circuits: CircuitReader,
        taxonomy: TaxonomySwitch,
        environ: Mapping[str, str],
        stop: anyio.Event | None = None,
        reload: Reload | None = None,
        paths: tuple[Path, Path] | None = None,
        listeners: Mapping[str, socket.socket] | None = None,
        desired: DesiredSessions | None = None,
        attributes: AttributeService | None = None,
        circuit_control: CircuitControl | None = None,
        messaging: SessionMessaging | None = None,
        platform: PlatformEvents | None = None,
        owners: SessionOwners | None = None,
        fleet: FleetDesk | None = None,
        fleet_view: Callable[[], FleetView] | None = None,
    ) -> None:
        self.bus = bus
        self.clock = clock
        self.board = StateBoard(sessions, circuits, clock, boot_id=bus.boot_id)
        # the sessions' platform events (the platform stream); None: a daemon built without them
        self.platform = platform
        self.hub = Hub(self.board, publish=self.bus.publish, timestamp=self._now, platform=platform)
        self.bus.subscribe(self.board)
        resolved = paths if paths is not None else socket_paths(config, environ)
        self.off_reason: str | None = resolved if isinstance(resolved, str) else None
        self.subscribe: UnixService | None = None
        self.control: UnixService | None = None
        self.control_service: ControlService | None = None
        if isinstance(resolved, str):
            return
        subscribe_path, control_path = resolved
        # the default location is ours to create; a configured one belongs to whoever configured it
        create_subscribe = paths is None and config.subscribe is None
        create_control = paths is None and config.control is None
        subscribe_policy, control_policy = policies(config)
        handed = dict(listeners or {})
        self._subscriber_side = subscriber_side = SubscribeService(
            self.hub,
            cap_bytes=config.subscriber_buffer_bytes,
            lagged_disconnect_after=config.lagged_disconnect_after,
            handshake_timeout=config.handshake_timeout,
            platform_policy=platform_policy(config),
        )
        self.control_service = ControlService(
            sessions,
            operations,
            self.board,
            bus=bus,
            taxonomy=taxonomy,
            clock=self.clock,
            handshake_timeout=config.handshake_timeout,
            idle_timeout=config.control_idle_timeout,
            stop=stop,
            reload=reload,
            sockets=self.stats,
            desired=desired,
            attributes=attributes,
            roles=control_policy,
            circuits=circuit_control,
            messaging=messaging,
            owners=owners,
            fleet=fleet,
            fleet_view=fleet_view,
        )
        common: dict[str, Any] = {
            "mode": config.mode_bits,
            "group": resolve_group(config.group),
            "max_connections": config.max_connections,
            "publish": self.bus.publish,
            "timestamp": self._now,
            "monotonic": self.clock.monotonic,
        }
        self.subscribe = UnixService(
            "subscribe",
            subscribe_path,
            policy=subscribe_policy,
            handler=subscriber_side.handle,
            listener=handed.get("subscribe"),
            create_directory=create_subscribe,
            **common,
        )
        self.control = UnixService(
            "control",
            control_path,
            policy=control_policy,
            handler=self.control_service.handle,
            listener=handed.get("control"),
            create_directory=create_control,
            **common,
        )

    def _now(self) -> str:
        return iso_utc(self.clock.time())

    def reconfigure(self, config: SocketsConfig) -> None:
        """A reload's ``[sockets]``: the access lists, roles and limits apply at once (a peer newly
        refused is refused at its next connect, and its open connections end); the paths, mode,
        group and ``enabled`` need a restart (the reload names ``sockets`` in ``restartRequired``)."""
        if self.subscribe is None or self.control is None or self.control_service is None:
            return
        subscribe_policy, control_policy = policies(config)
        self.subscribe.reconfigure(subscribe_policy, config.max_connections)
        self.control.reconfigure(control_policy, config.max_connections)
        self._subscriber_side.configure(
            cap_bytes=config.subscriber_buffer_bytes,
            lagged_disconnect_after=config.lagged_disconnect_after,
            handshake_timeout=config.handshake_timeout,
            platform_policy=platform_policy(config),
        )
        self.control_service.configure(
            roles=control_policy,
            handshake_timeout=config.handshake_timeout,
            idle_timeout=config.control_idle_timeout,
        )

    @property
    def enabled(self) -> bool:
        return self.subscribe is not None

    @property
    def services(self) -> list[Service]:
        return [self.serve]

    @property
    def paths(self) -> tuple[Path, Path] | None:
        if self.subscribe is None or self.control is None:
            return None
        return self.subscribe.path, self.control.path

    def bind(self) -> None:
        """Bind both sockets now, before any session starts (raises ConfigError naming the path)."""
        if self.subscribe is not None and self.control is not None:
            self.subscribe.bind()
            try:
                self.control.bind()
            except BaseException:
                self.subscribe.unbind()
                raise

    def close(self) -> None:
        """Close the listeners and remove our socket files if :meth:`serve` never ran (idempotent)."""
        for service in (self.subscribe, self.control):
            if service is not None:
                service.unbind()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.subscribe is not None:
            out["subscribe"] = {**self.subscribe.stats(), **self.hub.stats()}
            if self.platform is not None:
                # counts only (records, gaps, the windows' size): never content
                out["subscribe"]["platformEvents"] = self.platform.stats()
        if self.control is not None and self.control_service is not None:
            out["control"] = {**self.control.stats(), "deniedCalls": self.control_service.denied}
        return out

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Bind both sockets (or say why the API is off), report started, serve until cancelled."""
        if self.subscribe is None or self.control is None:
            self.bus.publish(SocketApiListening(None, None, self.off_reason))
            task_status.started()
            return
        async with anyio.create_task_group() as tg:
            await tg.start(self.subscribe.serve)
            await tg.start(self.control.serve)
            self.bus.publish(SocketApiListening(str(self.subscribe.path), str(self.control.path)))
            task_status.started()
