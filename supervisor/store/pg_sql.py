"""The desired-state commands as coroutines on a PostgreSQL connection, inside the caller's transaction.

For statements that must commit together with the store's own (the fleet's forwarded ``ctl start``/``stop``,
``AddSession`` and ``RemoveSession``: the row and its ``pg_notify`` in one transaction, run through
``PgStore.run_in_transaction``). Each one runs the store's own body (``sql_sessions.py``, the same that
:class:`~supervisor.store.pg.PgStore` runs) with :func:`~supervisor.store.pg.run_async`; nothing here is
SQL of its own. These are commands any member carries out: not fenced (docs/store.md, "The fence").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from supervisor.store import sql_sessions
from supervisor.store.model import DesiredSession
from supervisor.store.pg import Conn, run_async
from supervisor.store.sql import POSTGRES, Tx

__all__ = ["add_sessions", "forget_desired", "set_desired"]

#: commands: no fence source, so no fence and no epoch
_COMMAND: Final = Tx(POSTGRES)


async def set_desired(conn: Conn, desired: DesiredSession) -> None:
    """``ctl start``/``stop``: the session's desired state (as ``Store.set_desired(..., fenced=False)``)."""
    await run_async(conn, sql_sessions.set_desired(_COMMAND, desired, fenced=False))


async def add_sessions(conn: Conn, added: Sequence[DesiredSession]) -> None:
    """``AddSession``: the sessions' rows (as ``Store.add_sessions``)."""
    await run_async(conn, sql_sessions.add_sessions(_COMMAND, list(added)))


async def forget_desired(conn: Conn, session_id: str) -> None:
    """``RemoveSession``: the session's row gone (as ``Store.forget_desired``)."""
    await run_async(conn, sql_sessions.forget_desired(_COMMAND, session_id))
