"""``session-supervisor ctl attributes set|status``, ``ctl mismatches`` and ``ctl resolve`` (docs/attributes.md).

``attributes set SESSION_ID KEY=VALUE [KEY=VALUE ...] [--json]`` exits 0 only once the daemon has
the update durably in its outbox ("acknowledged"), 75 when it refused it for backpressure (try
later: ``retryAfterSeconds`` in the JSON answer; 75 is sysexits' EX_TEMPFAIL), 1 for any other
refusal (unknown or terminated session, no store, ...) and 2 for bad usage. Its JSON answer has
``accepted``, ``updateId``, ``coalesced`` and ``queueDepth``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import click
import msgspec

from supervisor.api.client import Client
from supervisor.api.protocol import ApiFault, Method
from supervisor.api.signatures import INT_MAX
from supervisor.cli.common import exit_code_of
from supervisor.cli.socket_option import UTF8, resolve_socket, sendable
from supervisor.errors import ApiError

__all__ = ["EX_TEMPFAIL", "attributes", "mismatches", "resolve"]

#: sysexits.h: "temporary failure; user is invited to retry"
EX_TEMPFAIL: Final = 75


def _call(method: str, parameters: dict[str, Any] | None = None, *, hint: str = "") -> dict[str, Any]:
    # the ctl group's --socket, stored as its context object
    path = resolve_socket(click.get_current_context().find_object(Path), "control")
    sendable(method, parameters, hint=hint)
    with Client(path) as client:
        return client.call(method, parameters)


def _print_json(value: dict[str, Any]) -> None:
    sys.stdout.buffer.write(msgspec.json.encode(value) + b"\n")
    sys.stdout.flush()


def _pairs(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{item}': expected KEY=VALUE", param_hint="KEY=VALUE")
        if key in out:
            raise click.BadParameter(f"'{key}' is given twice", param_hint="KEY=VALUE")
        out[key] = value
    return out


@click.group()
def attributes() -> None:
    """Update a session's conversation attributes (verified, never lost; seed edge case 2)."""


@attributes.command("set")
@click.argument("args", metavar="[SESSION_ID] KEY=VALUE...", nargs=-1, required=True, type=UTF8)
@click.option(
    "--conversation",
    "conversation_id",
    metavar="ID",
    type=UTF8,
    help="Update this Genesys conversation by its id, with no supervised session (no SESSION_ID then).",
)
@click.option(
    "--platform",
    type=click.Choice(["genesys", "cxone"]),
    help="The conversation's platform (with --conversation; genesys is implied, cxone is refused).",
)
@click.option(
    "--tenant",
    metavar="NAME",
    type=UTF8,
    help="The tenant ([tenants.NAME]) whose credential writes the conversation (with --conversation; "
    "default: the [platforms.genesys] one).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as one JSON object.")
def set_attributes(
    args: tuple[str, ...],
    conversation_id: str | None,
    platform: str | None,
    tenant: str | None,
    as_json: bool,
) -> None:
    """Queue an update of SESSION_ID's conversation attributes, or of a conversation by id.

    \b
    Exit 0 once the daemon has it durably (it survives a crash; it is sent, verified 3 s
    after the platform accepted it, repaired or flagged), 75 when the queue is full (try
    again after retryAfterSeconds), 1 for any other refusal, 2 for bad usage.
    Values of keys listed in [attributes] sensitive never appear in events or answers.

    \b
    Examples:
      session-supervisor ctl attributes set wm-3 survey=yes disposition=resolved --json
      session-supervisor ctl attributes set --conversation 5c0c4e0e-... wrapup=sale
      session-supervisor ctl attributes set --conversation 5c0c4e0e-... --tenant emea wrapup=sale
    """
    if conversation_id is None:
        if platform is not None:
            raise click.UsageError("--platform goes with --conversation")
        if tenant is not None:
            raise click.UsageError("--tenant goes with --conversation (a session's tenant is its own)")
        if len(args) < 2:
            raise click.UsageError("expected SESSION_ID and at least one KEY=VALUE (or --conversation ID)")
        params: dict[str, Any] = {"sessionId": args[0]}
        pairs = args[1:]
    else:
        params = {"conversationId": conversation_id, "platform": platform or "genesys"}
        if tenant is not None:
            params["tenant"] = tenant
        pairs = args
    values = _pairs(pairs)
    try:
        result = _call(
            Method.SET_ATTRIBUTES,
            {**params, "attributes": values},
            hint="split the update into several",
        )
    except ApiError as error:
        refused: dict[str, Any] = {"accepted": False, "error": error.name, **error.parameters}
        if as_json:
            _print_json(refused)
        click.echo(f"session-supervisor: error: {error}", err=True)
        code = EX_TEMPFAIL if error.name == ApiFault.BACKPRESSURE else exit_code_of(error)
        raise click.exceptions.Exit(code) from None
    if as_json:
        _print_json(result)
        return
    merged = f", coalesced ({', '.join(result.get('coalescedKeys', []))})" if result.get("coalesced") else ""
    click.echo(f"accepted {result['updateId']}: queue depth {result['queueDepth']}{merged}")


@attributes.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as one JSON object.")
def attributes_status(as_json: bool) -> None:
    """The outbox by state, the queue limit, backpressure and Retry-After pauses per tenant."""
    result = _call(Method.ATTRIBUTES_STATUS)
    if as_json:
        _print_json(result)
        return
    status = result["attributes"]
    rows = status.get("rows", {})
    store = status.get("store", {})
    lines = [
        f"store: {store.get('path', '-')}"
        + (f" (degraded: {store['degraded']})" if store.get("degraded") else ""),
        "writes: " + ", ".join(f"{k} {v}" for k, v in rows.items()),
    ]
    for tenant, state in status.get("tenants", {}).items():
        lines.append(f"{tenant}: backpressure {state['backpressure']}, paused {state['pausedForS']} s")
    click.echo("\n".join(lines))


@click.command()
@click.option("--all", "everything", is_flag=True, help="Include resolved mismatches.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as one JSON object.")
def mismatches(everything: bool, as_json: bool) -> None:
    """Attribute writes verification could not repair, for manual reconciliation.

    Values of sensitive keys are shown as <sensitive>. Resolve one with `ctl resolve ID`.
    """
    result = _call(Method.LIST_MISMATCHES, {"includeResolved": everything})
    if as_json:
        _print_json(result)
        return
    for m in result["mismatches"]:
        done = f" resolved: {m['resolution']}" if m.get("resolution") else ""
        click.echo(
            f"{m['id']} {m['sessionId']} {m['conversationId']} {m['key']}: {m['reason']} "
            f"(expected {m['expected']!r}, server {m['server']!r}){done}"
        )


@click.command()
# a mismatch id is a varlink int: a signed 64-bit integer (supervisor/api/signatures.py)
@click.argument("mismatch_id", metavar="ID", type=click.IntRange(min=1, max=INT_MAX))
@click.option("--resend", is_flag=True, help="Send our value again.")
@click.option("--accept-server", is_flag=True, help="Keep the server's value.")
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's answer as one JSON object.")
def resolve(mismatch_id: int, resend: bool, accept_server: bool, as_json: bool) -> None:
    """Resolve mismatch ID: --resend our value, or --accept-server's value (exactly one)."""
    # two flags, not one option with two flag values: click would let the last one win silently
    if resend and accept_server:
        raise click.UsageError("--resend and --accept-server exclude each other: give one")
    if not (resend or accept_server):
        raise click.UsageError("give --resend or --accept-server")
    resolution = "resend" if resend else "accept-server"
    result = _call(Method.RESOLVE_MISMATCH, {"mismatchId": mismatch_id, "resolution": resolution})
    if as_json:
        _print_json(result)
        return
    m = result["mismatch"]
    click.echo(f"mismatch {m['id']} ({m['key']}): {m['resolution']}")
