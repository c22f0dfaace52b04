"""Test-only hooks of the runtime, enabled by environment variables a production daemon never has.

* ``SESSION_SUPERVISOR_TEST_BLOCK_LOOP_ON_RELOAD=PATH``: every reload first reads the FIFO at
  ``PATH`` on the event loop, blocking it until a writer has written and closed it. Nothing else the
  daemon reads can block its loop any more (every file is opened ``O_NONBLOCK`` and refused unless
  it is a regular file); the watchdog test (tests/integration/test_systemd_notify.py)
  needs a loop that is really stuck while the process and its threads live on, to show that the
  pings come from the loop and stop with it.

The store's own hooks (a crash at a named point, an injected full disk) are in
``supervisor/store/testhooks.py``; docs/runtime.md lists both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["BLOCK_LOOP_ENV", "block_loop_on_reload"]

BLOCK_LOOP_ENV: Final = "SESSION_SUPERVISOR_TEST_BLOCK_LOOP_ON_RELOAD"


def block_loop_on_reload(environ: Mapping[str, str]) -> None:
    """Block the caller (the event loop) reading the FIFO named by the variable; nothing when unset."""
    path = environ.get(BLOCK_LOOP_ENV)
    if not path:
        return
    # deliberately a blocking open and read on the loop: this is the wedge the test asks for
    with open(path, "rb") as fifo:
        fifo.read()
