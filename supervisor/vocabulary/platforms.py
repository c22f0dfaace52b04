"""The platforms the daemon supervises sessions on: a configured session's ``platform``, an
envelope's ``platform`` (docs/taxonomy.md), the first half of an endpoint id."""

from __future__ import annotations

import enum

__all__ = ["Platform"]


class Platform(enum.StrEnum):
    GENESYS = "genesys"
    CXONE = "cxone"
