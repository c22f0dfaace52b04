"""``session-supervisor store copy``: move a one-host store into PostgreSQL (docs/store.md, "PostgreSQL").

Exit codes: 0 copied; 1 refused or failed, with one ``session-supervisor: error: ...`` line (a daemon
holds the store, the file is not a store of this release's schema, the PostgreSQL store already
holds sessions, the database cannot be reached); 2 bad usage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import click
import msgspec

from supervisor.credentials import read_secret
from supervisor.errors import StoreError


@click.group()
def store() -> None:
    """Move the durable store between SQLite and PostgreSQL (the daemons stopped)."""


@store.command("copy")
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The SQLite store file ([store] path; $STATE_DIRECTORY/store.sqlite3 under systemd).",
)
@click.option(
    "--to", "url", required=True, help="The PostgreSQL store: a postgresql:// URL, no password in it."
)
@click.option(
    "--password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The role's password, in a file (as [store] passwordFile).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows copied per table as one JSON object.")
def copy(source: Path, url: str, password_file: Path | None, as_json: bool) -> None:
    """Copy a SQLite store into a new PostgreSQL store, every row and the epoch.

    Stop every daemon using the file first: the copy refuses while one has it open (and a daemon
    refuses to open it while the copy runs). The PostgreSQL store must hold no sessions yet.
    With --json: {"from", "to", "rows": {table: n}, "epoch"}.
    """
    from supervisor.config_urls import redacted

    try:
        from supervisor.store.copy import copy_store
    except ImportError:
        raise StoreError(
            redacted(url), "PostgreSQL support is not installed: pip install 'session-supervisor[postgres]'"
        ) from None
    secret = None
    if password_file is not None:
        secret = read_secret(str(password_file), key="--password-file", config_dir=Path.cwd(), environ={})
    report = anyio.run(copy_store, source, url, None if secret is None else secret.reveal())
    if as_json:
        body = {
            "from": report.source,
            "to": redacted(report.target),
            "rows": report.rows,
            "epoch": report.epoch,
        }
        sys.stdout.buffer.write(msgspec.json.encode(body) + b"\n")
        return
    rows = ", ".join(f"{n} {table.replace('_', ' ')}" for table, n in report.rows.items())
    click.echo(f"copied {report.source} to {redacted(report.target)}: {rows}; epoch {report.epoch}")
