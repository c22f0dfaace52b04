"""CXone paths are case-insensitive and tolerate ``//``: route them as the platform does (CX-1).

NICE's agent SDK mixes spellings against one host (``@nice-devone/core-sdk``
``api-uri-constants.js``): ``/InContactAPI/services/v23.0/agent-sessions``,
``/inContactAPI/services/v2.0/...``, ``/incontactapi/services/...``,
``/incontactapi//services/...``, and ``/incontactauthorizationserver/token`` (``cxone-auth.js``).
The platform (IIS) answers them all. aiohttp's router is case-sensitive, so before it resolves a
request :func:`case_insensitive` rewrites the path into the casing of the one registered template
it matches (literal segments compared without case, empty segments dropped), keeping parameter
values as sent. The route templates, and so fault endpoints and stats, keep their canonical
spelling (``/inContactAPI/services/v{N}.0/...``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo
from yarl import URL

__all__ = ["case_insensitive"]

# a route parameter in an aiohttp template: {name} or {name:regex}
_PARAM = re.compile(r"\{(?P<name>\w+)(?::(?P<regex>[^{}]*))?\}")


class _Segment:
    """One template segment: a regex (case-insensitive for literals) and how to rebuild it."""

    __slots__ = ("_pieces", "literal", "regex")

    def __init__(self, template: str) -> None:
        pattern, pos = "", 0
        self._pieces: list[str] = []  # literal, param, literal, param, ..., literal
        for match in _PARAM.finditer(template):
            literal = template[pos : match.start()]
            self._pieces.append(literal)
            pattern += f"(?i:{re.escape(literal)})({match.group('regex') or '[^/]+'})"
            pos = match.end()
        self._pieces.append(template[pos:])
        pattern += f"(?i:{re.escape(template[pos:])})"
        self.regex = re.compile(pattern)
        self.literal = len(self._pieces) == 1

    def rebuild(self, sent: str) -> str | None:
        """``sent`` in the template's casing (parameter values unchanged), or None if it does not fit."""
        match = self.regex.fullmatch(sent)
        if match is None:
            return None
        values = match.groups()
        out = self._pieces[0]
        for value, literal in zip(values, self._pieces[1:], strict=True):
            out += value + literal
        return out


def _templates(app: web.Application) -> list[list[_Segment]]:
    out: list[list[_Segment]] = []
    for resource in app.router.resources():
        canonical = resource.canonical
        if canonical.startswith("/"):
            out.append([_Segment(s) for s in canonical.strip("/").split("/")])
    # the most literal template first: ".../agent-sessions/JOIN" is join, not a session id
    return sorted(out, key=lambda t: -sum(seg.literal for seg in t))


def _canonical(path: str, templates: list[list[_Segment]]) -> str | None:
    sent = [s for s in path.split("/") if s]  # "//" tolerated, as the platform does
    for template in templates:
        if len(template) != len(sent):
            continue
        rebuilt = [seg.rebuild(part) for seg, part in zip(template, sent, strict=True)]
        if all(part is not None for part in rebuilt):
            return "/" + "/".join(p for p in rebuilt if p is not None)
    return None


def case_insensitive(app: web.Application) -> None:
    """Make ``app`` resolve paths the way CXone does; call it once every route is added."""
    router = app.router
    templates = _templates(app)
    resolve: Callable[[web.Request], Awaitable[UrlMappingMatchInfo]] = router.resolve

    async def resolve_any_case(request: web.Request) -> UrlMappingMatchInfo:
        canonical = _canonical(request.path, templates)
        if canonical is None or canonical == request.path:
            return await resolve(request)
        rel = URL.build(path=canonical, query_string=request.query_string, encoded=False)
        return await resolve(request.clone(rel_url=rel))

    router.resolve = resolve_any_case  # type: ignore[method-assign]
