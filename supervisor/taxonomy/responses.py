"""The ``[responses]`` section of a taxonomy file: what each platform's response must carry.

Seed section 3's partial-success rule, per platform and per response (docs/taxonomy.md, "Response
validation")::

    [responses."genesys.webmessaging.SessionResponse"]
    required = ["connected", "newSession", "readOnly"]
    conversationField = "id"      # optional: where the response names its conversation
    description = "..."

Checked on load: a name ``platform.channel.Response`` with a known platform and channel, a
non-empty list of distinct field names, no unknown key, and every response a transport
validates (:data:`REQUIRED_RESPONSES`) present. Errors name the file, the key and the problem.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from supervisor.errors import TaxonomyError
from supervisor.taxonomy.rules import ResponseSpec

__all__ = ["REQUIRED_RESPONSES", "compile_responses"]

# responses the daemon's transports validate: every taxonomy version must say what each must carry
REQUIRED_RESPONSES = (
    "genesys.webmessaging.SessionResponse",
    "genesys.notifications.Channel",
    "genesys.rest.Conversation",
    "cxone.agent-session.AgentSession",
    "cxone.agent-session.GetNextEvent",
)
_RESPONSE_NAME = re.compile(
    r"^(?P<platform>[a-z]+)\.(?P<channel>[a-z-]+)\.(?P<response>[A-Za-z][A-Za-z0-9]*)$"
)
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class _ResponseFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    required: list[str]
    conversation_field: str | None = None
    description: str = ""


def _decode(origin: str, where: str, value: object) -> _ResponseFile:
    try:
        return msgspec.convert(value, _ResponseFile)
    except msgspec.ValidationError as exc:
        text, _, path = str(exc).partition(" - at `$")
        path = path.rstrip("`").lstrip(".")
        located = f"{where}.{path}" if path else where
        raise TaxonomyError(f"{origin}: {located}: {text[:1].lower()}{text[1:]}") from None


def compile_responses(
    origin: str, raw: dict[str, dict[str, Any]], platforms: set[str], channels: set[str]
) -> dict[str, ResponseSpec]:
    """Check ``[responses.NAME]`` entries (module docstring) and compile them."""
    out: dict[str, ResponseSpec] = {}
    for name, raw_spec in raw.items():
        where = f"responses.{name}"
        match = _RESPONSE_NAME.match(name)
        if match is None:
            raise TaxonomyError(f"{origin}: {where}: a response is named platform.channel.Response")
        platform, channel = match.group("platform"), match.group("channel")
        if platform not in platforms or channel not in channels:
            raise TaxonomyError(f"{origin}: {where}: unknown platform or channel '{platform}.{channel}'")
        spec = _decode(origin, where, raw_spec)
        if not spec.required:
            raise TaxonomyError(f"{origin}: {where}.required: name at least one field")
        for field_name in (*spec.required, *([spec.conversation_field] if spec.conversation_field else [])):
            if not _FIELD_NAME.match(field_name):
                raise TaxonomyError(f"{origin}: {where}: '{field_name[:40]}' is not a field name")
        if len(set(spec.required)) != len(spec.required):
            raise TaxonomyError(f"{origin}: {where}.required: a field is named twice")
        out[name] = ResponseSpec(
            name=name,
            platform=platform,
            channel=channel,
            required=tuple(spec.required),
            conversation_field=spec.conversation_field,
            description=spec.description,
        )
    for name in REQUIRED_RESPONSES:
        if name not in out:
            raise TaxonomyError(f'{origin}: responses."{name}": missing (a transport validates it)')
    return out
