"""Request bodies and WebSocket frames the simulators parse: strict, bounded, never a 500.

Both simulators decode what clients send through these two functions, so malformed input of
any kind (not UTF-8, not JSON, ``NaN``, nested deeper than :data:`MAX_JSON_DEPTH`, a broken
form) is a :class:`MalformedBody` the caller answers in its platform's own 400 shape, instead
of an exception that escapes as a 500 or closes a socket with 1011 (docs/simulators.md).

::

    parse_json(b'{"attributes": {"k": "v"}}')   # -> dict
    parse_form(b"grant_type=client_credentials")   # -> {"grant_type": "client_credentials"}
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from supervisor.taxonomy.envelope import MAX_NESTING, nesting_exceeds

__all__ = ["MAX_FORM_FIELDS", "MAX_JSON_DEPTH", "MalformedBody", "parse_form", "parse_json"]

#: the deepest nesting of arrays and objects accepted in a body or frame (as everywhere we read JSON)
MAX_JSON_DEPTH = MAX_NESTING
#: the most fields accepted in a form body (an OAuth token request has three or four)
MAX_FORM_FIELDS = 100


class MalformedBody(ValueError):
    """A body or frame that cannot be used; the message says why in a few words."""


def _no_constant(name: str) -> Any:
    # RFC 8259 has no NaN or Infinity; the platforms' JSON parsers refuse them too
    raise MalformedBody(f"{name} is not JSON")


def parse_json(data: bytes | str, *, constants: bool = False) -> Any:
    """Strict JSON (UTF-8, no ``NaN``/``Infinity``) nested at most :data:`MAX_JSON_DEPTH` levels.

    ``constants=True`` lets ``NaN`` and ``Infinity`` through as floats, for a caller whose
    validation then names the field they were given for (the admin API).
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise MalformedBody("not UTF-8") from None
    try:
        value = json.loads(text, parse_constant=None if constants else _no_constant)
    except RecursionError:
        # the decoder ran out of stack first: far deeper than MAX_JSON_DEPTH
        raise MalformedBody(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except MalformedBody:
        raise
    except ValueError:  # JSONDecodeError, or an integer too long to convert
        raise MalformedBody("not valid JSON") from None
    if nesting_exceeds(value, MAX_JSON_DEPTH):
        raise MalformedBody(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def parse_form(raw: bytes) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (UTF-8, WHATWG URL §5.1); the first value of a
    repeated name wins, as with aiohttp's ``request.post()``."""
    try:
        pairs = parse_qsl(
            raw.decode("utf-8"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except UnicodeDecodeError:
        raise MalformedBody("the form is not UTF-8") from None
    except ValueError:  # more than MAX_FORM_FIELDS fields
        raise MalformedBody(f"more than {MAX_FORM_FIELDS} form fields") from None
    out: dict[str, str] = {}
    for name, value in pairs:
        out.setdefault(name, value)
    return out
