"""The durable store: desired sessions, the session ledger, the outbox, the ledger and mismatches.

:class:`Store` (``model.py``) is the interface; :class:`SqliteStore` (``sqlite.py``) the embedded
implementation, one SQLite file in the service's state directory. docs/store.md describes the
schema, the durability choice and what a second implementation must provide.
"""

from __future__ import annotations

from supervisor.store.model import (
    Claim,
    DesiredSession,
    DesiredState,
    LedgerChange,
    LedgerEntry,
    Mismatch,
    NewMismatch,
    OpenedSession,
    OutboxRow,
    Outcome,
    Resolution,
    ResolveRefused,
    RowChange,
    RowStatus,
    ServerSession,
    ServerState,
    Store,
    Submission,
    SubmitResult,
    UpdateOutcome,
    payload_hash,
    value_hash,
)
from supervisor.store.sqlite import SqliteStore, Synchronous

__all__ = [
    "Claim",
    "DesiredSession",
    "DesiredState",
    "LedgerChange",
    "LedgerEntry",
    "Mismatch",
    "NewMismatch",
    "OpenedSession",
    "OutboxRow",
    "Outcome",
    "Resolution",
    "ResolveRefused",
    "RowChange",
    "RowStatus",
    "ServerSession",
    "ServerState",
    "SqliteStore",
    "Store",
    "Submission",
    "SubmitResult",
    "Synchronous",
    "UpdateOutcome",
    "payload_hash",
    "value_hash",
]
