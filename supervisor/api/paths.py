"""Where the two sockets are by default: ``$XDG_RUNTIME_DIR/session-supervisor/`` (docs/socket-api.md).

Apart from :mod:`supervisor.api.listen` (binding, peer credentials, the access policies) so that the
clients (``watch``, ``ctl``) find the default paths without importing what only the daemon needs
(docs/runtime.md, "Floors": a short command imports what it uses).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: the directory under ``$XDG_RUNTIME_DIR`` that holds both sockets
DIRECTORY = "session-supervisor"


def default_paths(environ: Mapping[str, str]) -> tuple[Path, Path] | None:
    """``$XDG_RUNTIME_DIR/session-supervisor/{subscribe,control}.sock``; None when the variable is unset."""
    runtime = environ.get("XDG_RUNTIME_DIR", "").strip()
    if not runtime or not os.path.isabs(runtime):
        return None
    base = Path(runtime) / DIRECTORY
    return base / "subscribe.sock", base / "control.sock"
