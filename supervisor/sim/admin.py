"""The admin HTTP API of a simulator, on its own listener (docs/simulators.md).

``make_admin_app(controller, recorder, *, name="genesys", urls=None)`` returns an
:class:`aiohttp.web.Application` with these endpoints (all JSON; errors are one line,
``{"error": "<field>: <problem>"}``, never a stack trace):

==========================  ==================================================================================
``GET /``                   ``{"simulator": name, "urls": {...}, "fault_kinds": [...]}``
``POST /faults``            body: one Fault object (or a JSON list of them), e.g.
                            ``{"kind": "close", "params": {"code": 1012}, "share": 0.5}``.
                            201 ``{"faults": [<fault with "id">...]}``; 400 ``{"error": "fault.share: ..."}``
``GET /faults``             200 ``{"faults": [{..., "id": "f1", "state": "pending"|"active", "hits": n,
                            "starts_in_s": s}]}``
``DELETE /faults``          clear every fault: 200 ``{"cleared": n}``
``DELETE /faults/{id}``     clear one fault: 200 ``{"cleared": 1}``; 404 ``{"error": "fault f9: not found"}``
``GET /stats``              200: :meth:`Recorder.snapshot() <supervisor.sim.recorder.Recorder.snapshot>`
``POST /stats/reset``       200 ``{"reset": true}``: forget what was recorded
``GET /activity``           200 NDJSON, one entry a line (:mod:`supervisor.sim.activity`): ``?since=N`` (the
                            last ``seq`` read; 0, the default, from the start) and ``?limit=M`` (1..50000);
                            a ``gap`` line first when entries after N left the ring unread. Header
                            ``X-Activity-Next``: the ``since`` of the next read. 400 ``{"error": "since: ..."}``
==========================  ==================================================================================

Fault fields: ``kind`` (see :class:`~supervisor.sim.faults.FaultKind`), ``share`` (0..1), ``at``
(seconds from now), ``duration_s`` (null = until cleared), ``count`` (null = unlimited),
``endpoint`` (fnmatch pattern or substring of ``"METHOD /route/template"``), ``params``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from supervisor.errors import SimulatorError
from supervisor.sim.activity import MAX_PAGE, ActivityLog
from supervisor.sim.bodies import MalformedBody, parse_json
from supervisor.sim.faults import Fault, FaultController, FaultKind, decode_fault
from supervisor.sim.recorder import Recorder

__all__ = ["make_admin_app"]

_MAX_BODY = 64 * 1024
_CONTROLLER: web.AppKey[FaultController] = web.AppKey("controller", FaultController)
_RECORDER: web.AppKey[Recorder] = web.AppKey("recorder", Recorder)
_ACTIVITY: web.AppKey[ActivityLog] = web.AppKey("activity", ActivityLog)
_ACTIVITY_PARAMS = frozenset({"since", "limit"})


def _error(status: int, message: str) -> web.Response:
    # one line, no traceback, no echo of secrets (a fault carries none)
    return web.json_response({"error": message.splitlines()[0] if message else "error"}, status=status)


def make_admin_app(
    controller: FaultController,
    recorder: Recorder,
    *,
    name: str = "simulator",
    urls: dict[str, str] | None = None,
    routes: list[tuple[str, str, Callable[[web.Request], Awaitable[web.StreamResponse]]]] | None = None,
    activity: ActivityLog | None = None,
) -> web.Application:
    """The admin API over one simulator's fault controller and recorder (see the module docstring),
    plus a simulator's own ``routes`` (method, path, handler), e.g. Genesys conversation seeding."""
    app = web.Application(client_max_size=_MAX_BODY, middlewares=[_errors_middleware])
    app[_CONTROLLER] = controller
    app[_RECORDER] = recorder
    app[_ACTIVITY] = activity if activity is not None else ActivityLog()
    info = {"simulator": name, "urls": dict(urls or {}), "fault_kinds": [k.value for k in FaultKind]}

    async def index(request: web.Request) -> web.Response:
        return web.json_response(info)

    app.router.add_get("/", index)
    app.router.add_post("/faults", _post_faults)
    app.router.add_get("/faults", _get_faults)
    app.router.add_delete("/faults", _delete_faults)
    app.router.add_delete("/faults/{id}", _delete_fault)
    app.router.add_get("/stats", _get_stats)
    app.router.add_post("/stats/reset", _reset_stats)
    app.router.add_get("/activity", _get_activity)
    for method, path, handler in routes or ():
        app.router.add_route(method, path, handler)
    return app


@web.middleware
async def _errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, f"{request.method} {request.path}: {exc.reason}")
    except SimulatorError as exc:
        return _error(400, str(exc))
    return response


async def _post_faults(request: web.Request) -> web.Response:
    controller = request.app[_CONTROLLER]
    raw = await request.read()
    try:
        # NaN and Infinity parse, so that validation can name the field and its bounds
        data = parse_json(raw, constants=True)
    except MalformedBody as exc:
        return _error(400, f"fault: invalid JSON ({exc})")
    items = data if isinstance(data, list) else [data]
    if not items:
        return _error(400, "fault: empty list")
    faults: list[Fault] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            return _error(400, f"fault{f'[{i}]' if isinstance(data, list) else ''}: must be a JSON object")
        try:
            faults.append(decode_fault(item))
        except SimulatorError as exc:
            prefix = f"[{i}] " if isinstance(data, list) else ""
            return _error(400, prefix + str(exc))
    stored = [controller.inject(f).to_dict() for f in faults]
    return web.json_response({"faults": stored}, status=201)


async def _get_faults(request: web.Request) -> web.Response:
    return web.json_response({"faults": request.app[_CONTROLLER].describe()})


async def _delete_faults(request: web.Request) -> web.Response:
    return web.json_response({"cleared": request.app[_CONTROLLER].clear()})


async def _delete_fault(request: web.Request) -> web.Response:
    fault_id = request.match_info["id"]
    if request.app[_CONTROLLER].clear(fault_id) == 0:
        return _error(404, f"fault {fault_id[:40]}: not found")
    return web.json_response({"cleared": 1})


async def _get_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[_RECORDER].snapshot())


async def _reset_stats(request: web.Request) -> web.Response:
    request.app[_RECORDER].reset()
    return web.json_response({"reset": True})


def _count(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.getall(name, [])
    if not raw:
        return default
    if len(raw) > 1:
        raise SimulatorError(f"{name}: given {len(raw)} times (once at most)")
    text = raw[0]
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise SimulatorError(f"{name}: expected a whole number, got {text[:40]!r}")
    value = int(text)
    if not low <= value <= high:
        raise SimulatorError(f"{name}: {value} is out of range ({low}..{high})")
    return value


async def _get_activity(request: web.Request) -> web.StreamResponse:
    log = request.app[_ACTIVITY]
    unknown = sorted(set(request.query) - _ACTIVITY_PARAMS)
    if unknown:
        return _error(400, f"{unknown[0][:40]}: unknown parameter (expected since, limit)")
    last = log.last_seq
    since = _count(request, "since", 0, 0, 10**18)
    if since > last:
        return _error(
            400, f"since: {since} is past the last entry ({last}): a cursor of another simulator run?"
        )
    limit = _count(request, "limit", MAX_PAGE, 1, MAX_PAGE)
    page = log.since(since, limit)
    body = b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in page.lines(since))
    return web.Response(
        body=body,
        content_type="application/x-ndjson",
        headers={"X-Activity-Next": str(page.next)},
    )
