"""``session-supervisor ctl VERB``: the daemon's control socket from the command line."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import msgspec

from supervisor.api.client import Client
from supervisor.api.protocol import Method
from supervisor.cli import ctl_attributes, ctl_sessions
from supervisor.cli.common import exit_code_of, stdout_console
from supervisor.cli.ctl_sessions import Selection, act_options, selector_options
from supervisor.cli.socket_option import UTF8, resolve_socket, sendable, socket_option
from supervisor.errors import ApiError
from supervisor.vocabulary import Platform, SessionState

_STATES = tuple(state.value for state in SessionState)
_PLATFORMS = tuple(platform.value for platform in Platform)


def _json_option(func: Any) -> Any:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the daemon's answer as one JSON object."
    )(func)


@click.group()
@socket_option("control")
@click.pass_context
def ctl(ctx: click.Context, socket_path: Path | None) -> None:
    """Control the running daemon over its control socket.

    \b
    Every verb answers or fails with one line: exit 0 when done, 1 when the daemon
    refused it (the typed error is printed) or cannot be reached, 2 on bad usage,
    69 when the session is in a shard this daemon does not own (NotOwner).
    Verbs that change something are published as CONTROL_COMMAND events, with your
    uid and pid, so subscribers see who did what.

    \b
    Examples:
      session-supervisor ctl --socket /run/session-supervisor/control.sock status --json
      session-supervisor ctl start wm-3          (a terminated session re-authenticates)
      session-supervisor ctl taxonomy use /etc/session-supervisor/taxonomy-v2.toml
    """
    ctx.obj = socket_path


def _call(method: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    # the group's --socket, stored as its context object
    path = resolve_socket(click.get_current_context().find_object(Path), "control")
    sendable(method, parameters)
    with Client(path) as client:
        return client.call(method, parameters)


def _answered(method: str, parameters: dict[str, Any], as_json: bool) -> dict[str, Any]:
    """The daemon's answer; a typed refusal is one stderr line and exit 1, with ``--json`` also
    ``{"error": NAME, ...its parameters}`` on stdout for a script to read."""
    try:
        return _call(method, parameters)
    except ApiError as error:
        if as_json:
            refused = {"error": error.name, **error.parameters}
            sys.stdout.buffer.write(msgspec.json.encode(refused) + b"\n")
            sys.stdout.flush()
        click.echo(f"session-supervisor: error: {error}", err=True)
        raise click.exceptions.Exit(exit_code_of(error)) from None


def _plain(value: Any) -> str:
    """A value as a person reads it: nested objects as compact JSON, nothing as "-"."""
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)


def _emit(result: dict[str, Any], as_json: bool, text: str) -> None:
    if as_json:
        sys.stdout.buffer.write(msgspec.json.encode(result) + b"\n")
        sys.stdout.flush()
    else:
        click.echo(text)


@ctl.command()
@_json_option
def status(as_json: bool) -> None:
    """Boot id, uptime, sessions by state, circuits, taxonomy and the sockets' counters."""
    result = _call(Method.STATUS)
    sessions = result["sessions"]
    by_state = ", ".join(f"{state} {n}" for state, n in sessions["byState"].items()) or "none"
    circuits = ", ".join(f"{c['endpoint']} {c['state']}" for c in result["circuits"]) or "none yet"
    lines = [
        f"daemon {result['bootId']} up {result['uptimeSeconds']:.0f} s, taxonomy {result['taxonomy']}"
        + (", draining" if result.get("draining") else ""),
        f"sessions: {sessions['total']} ({by_state})",
        f"circuits: {circuits}",
    ]
    for name, stats in result.get("sockets", {}).items():
        extra = f", {stats['subscribers']} subscribers" if "subscribers" in stats else ""
        denied = (
            f", {stats['deniedCalls']} calls denied for the caller's role" if "deniedCalls" in stats else ""
        )
        lines.append(
            f"{name} socket: {stats['path']}: {stats['connections']} connections{extra}, "
            f"{stats['refusedPeers']} peers refused{denied}"
        )
    fleet = result.get("fleet")
    if isinstance(fleet, dict):
        lines.extend(_fleet_lines(fleet))
    _emit(result, as_json, "\n".join(lines))


def _ranges(numbers: list[int]) -> str:
    """``0-3, 7, 9-12``: shard numbers as runs."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


def _fleet_lines(fleet: dict[str, Any]) -> list[str]:
    """Status's fleet section (docs/socket-api.md, "A fleet"): the members, then this member's shards."""
    shards = fleet["shards"]
    mine = [s for s in shards if s["mine"]]
    lines = [
        f"fleet: member {fleet['member']}, {len(fleet['members'])} members, "
        f"{len(mine)} of {len(shards)} shards mine"
    ]
    if fleet.get("problem"):
        lines.append(f"  as last read: {fleet['problem']}")
    for m in fleet["members"]:
        this = " (this daemon)" if m["mine"] else ""
        age = m.get("heartbeatAgeSeconds")
        heard = "" if age is None else f", heartbeat {age:.1f} s ago"
        silent = "" if m.get("live", True) else ", silent"
        lines.append(
            f"  member {m['member']} on {m['host']}: {m['state']}{silent}, {m['shards']} shards{heard}{this}"
        )
    if mine:
        epochs = sorted({s["epoch"] for s in mine})
        span = str(epochs[0]) if len(epochs) == 1 else f"{epochs[0]}-{epochs[-1]}"
        lines.append(f"  mine: shards {_ranges([s['shard'] for s in mine])} (epochs {span})")
    free = [s["shard"] for s in shards if s["owner"] is None]
    if free:
        lines.append(f"  unowned: shards {_ranges(free)}")
    return lines


@ctl.group(invoke_without_command=True)
@selector_options
@click.option("--session", "sessions", multiple=True, metavar="ID", type=UTF8)
@_json_option
@click.pass_context
def sessions(
    ctx: click.Context,
    states: tuple[str, ...],
    reasons: tuple[str, ...],
    platforms: tuple[str, ...],
    kinds: tuple[str, ...],
    origins: tuple[str, ...],
    tenants: tuple[str, ...],
    sessions: tuple[str, ...],
    as_json: bool,
) -> None:
    """List sessions (optionally filtered) with state, origin, attempts, last error and circuit;
    `sessions add` and `sessions remove` change which sessions there are."""
    if ctx.invoked_subcommand is not None:
        return
    selection = Selection(states, reasons, platforms, kinds, origins, tenants=tenants)
    result = _call(Method.LIST_SESSIONS, {"sessions": list(sessions) or None})
    result["sessions"] = [row for row in result["sessions"] if selection.matches(row)]
    if as_json:
        _emit(result, True, "")
        return
    from rich.table import Table

    table = Table(pad_edge=False)
    columns = ("session", "platform", "kind", "origin", "state", "since", "attempts", "last error", "circuit")
    # a tenant column once a named tenant's session is listed (a single-tenant daemon's table as it was)
    tenanted = any(row.get("tenant") for row in result["sessions"])
    for column in ("session", "tenant", *columns[1:]) if tenanted else columns:
        table.add_column(column, no_wrap=True)
    for row in result["sessions"]:
        error = row.get("lastError") or {}
        circuit = row.get("circuit") or {}
        table.add_row(
            row["sessionId"],
            *((row.get("tenant") or "",) if tenanted else ()),
            row["platform"],
            row["kind"],
            row.get("origin", "config"),
            row["state"],
            row["since"],
            str(row["attempts"]),
            f"{error.get('code', '')} {error.get('class', '')}".strip(),
            f"{circuit.get('endpoint', '')} {circuit.get('state', '')}".strip(),
        )
    stdout_console().print(table)


sessions.add_command(ctl_sessions.add_command())
sessions.add_command(ctl_sessions.remove_command())


@ctl.command()
@click.argument("session_id", metavar="ID", type=UTF8)
@_json_option
def show(session_id: str, as_json: bool) -> None:
    """One session in full, its termination included."""
    result = _answered(Method.SHOW_SESSION, {"sessionId": session_id}, as_json)
    text = "\n".join(f"{key}: {_plain(value)}" for key, value in result["session"].items())
    _emit(result, as_json, text)


@ctl.command()
@click.argument("session_ids", metavar="[ID]...", nargs=-1, type=UTF8)
@selector_options
@act_options
@_json_option
def start(
    session_ids: tuple[str, ...],
    states: tuple[str, ...],
    reasons: tuple[str, ...],
    platforms: tuple[str, ...],
    kinds: tuple[str, ...],
    origins: tuple[str, ...],
    tenants: tuple[str, ...],
    everything: bool,
    yes: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Start sessions that are not running: a full authentication cycle each.

    \b
    After a fail-fast (SESSION_TERMINATED, action REVOKE_LOCAL_STORAGE_AND_REAUTHENTICATE)
    this is the re-authentication: a new session, nothing reused from the old one.
    Ids, selectors or --all (e.g. `ctl start --state terminated --yes` after an outage);
    one answer per session (with --json one JSON object per line), paced by admission.
    """
    selection = Selection(states, reasons, platforms, kinds, origins, everything, tenants)
    _start_or_stop("start", Method.START_SESSION, _started, session_ids, selection, yes, dry_run, as_json)


@ctl.command()
@click.argument("session_ids", metavar="[ID]...", nargs=-1, type=UTF8)
@selector_options
@act_options
@_json_option
def stop(
    session_ids: tuple[str, ...],
    states: tuple[str, ...],
    reasons: tuple[str, ...],
    platforms: tuple[str, ...],
    kinds: tuple[str, ...],
    origins: tuple[str, ...],
    tenants: tuple[str, ...],
    everything: bool,
    yes: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Stop sessions: close 1000 (CXone: end the agent session); they are not reconnected.

    Ids, selectors or --all; one answer per session (with --json one JSON object per line)."""
    selection = Selection(states, reasons, platforms, kinds, origins, everything, tenants)
    _start_or_stop("stop", Method.STOP_SESSION, _stopped, session_ids, selection, yes, dry_run, as_json)


def _started(result: dict[str, Any]) -> str:
    again = " (re-authenticating)" if result.get("reauthenticated") else ""
    return f"started {result['sessionId']}: {result['state']}{again}{ctl_sessions.forwarded_note(result)}"


def _stopped(result: dict[str, Any]) -> str:
    return f"stopped {result['sessionId']}: {result['state']}{ctl_sessions.forwarded_note(result)}"


def _start_or_stop(
    verb: str,
    method: Method,
    line: Callable[[dict[str, Any]], str],
    session_ids: tuple[str, ...],
    selection: Selection,
    yes: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """One id and nothing else: one call, its answer as ever (a refusal exits 1 with its line); ids,
    selectors or --all: one call per session through ``ctl_sessions.act``, one answer each."""
    if len(session_ids) == 1 and not (selection.given or dry_run):
        result = _answered(method, {"sessionId": session_ids[0]}, as_json)
        _emit(result, as_json, line(result))
        return
    ctl_sessions.act(
        verb, method, session_ids, selection, yes=yes, dry_run=dry_run, as_json=as_json, line=line
    )


@ctl.command()
@click.argument("session_id", metavar="SESSION_ID", type=UTF8)
@click.argument("text", metavar="TEXT", type=UTF8)
@click.option(
    "--client-id",
    metavar="ID",
    type=UTF8,
    default=None,
    help="The message's client id (default: a new UUID): the same id never delivers twice.",
)
@_json_option
def send(session_id: str, text: str, client_id: str | None, as_json: bool) -> None:
    """Send TEXT as the guest of a live Web Messaging session; print the platform's message id.

    \b
    A send the platform leaves unanswered is looked for by its client id (in what the platform
    echoed, then in the guest history) before it is ever sent again, once, with the same id.
    Refused (exit 1, the typed error printed): an unknown or terminated session, one not active,
    a CXone or notifications session, a read-only conversation, the platform's refusal (its code),
    or a send left unconfirmed (SendUnconfirmed: it may or may not have arrived).
    With --json: {"sessionId", "messageId", "clientId"}; a refusal {"error", ...its parameters}.
    """
    parameters: dict[str, Any] = {"sessionId": session_id, "text": text}
    if client_id is not None:
        parameters["clientId"] = client_id
    result = _answered(Method.SEND_MESSAGE, parameters, as_json)
    _emit(result, as_json, f"sent on {result['sessionId']}: message {result['messageId']}")


@ctl.command("agent-state")
@click.argument("session_id", metavar="SESSION_ID", type=UTF8)
@click.argument("state", metavar="STATE", type=UTF8)
@click.option("--reason", metavar="R", type=UTF8, default=None, help="The reason (an Unavailable code).")
@_json_option
def agent_state(session_id: str, state: str, reason: str | None, as_json: bool) -> None:
    """Set the agent state of a live CXone session (e.g. Available, Unavailable --reason Break).

    \b
    The platform accepts it (202) and the change arrives as an AgentState event on the session.
    Refused (exit 1): an unknown or terminated session, one not active, a Genesys session, or the
    platform's refusal (its code). With --json: {"sessionId", "state", "reason", "accepted"}; a
    refusal {"error", ...its parameters}.
    """
    parameters: dict[str, Any] = {"sessionId": session_id, "state": state}
    if reason is not None:
        parameters["reason"] = reason
    result = _answered(Method.SET_AGENT_STATE, parameters, as_json)
    why = f" ({result['reason']})" if result.get("reason") else ""
    _emit(result, as_json, f"agent state of {result['sessionId']}: {result['state']}{why} accepted")


@ctl.command()
@click.option(
    "--end-sessions",
    is_flag=True,
    help="End every session on the platform (guests closeSession, CXone DELETE) instead of handing "
    "them over to the next start.",
)
@_json_option
def drain(end_sessions: bool, as_json: bool) -> None:
    """Drain the daemon like SIGTERM, then it exits. With a store the sessions are handed over (left
    alive for the next start); --end-sessions ends them. Needs the administrator role."""
    result = _call(Method.DRAIN, {"endSessions": True} if end_sessions else None)
    if result.get("handover"):
        said = "draining: the daemon hands its sessions over to the next start and exits"
    else:
        said = "draining: the daemon ends its sessions and exits"
    _emit(result, as_json, said)


@ctl.group()
def taxonomy() -> None:
    """Switch the active taxonomy version at run time (validated first)."""


@taxonomy.command("use")
@click.argument("version", metavar="VERSION|PATH", type=UTF8)
@_json_option
def taxonomy_use(version: str, as_json: bool) -> None:
    """Make VERSION (shipped, e.g. v1) or a taxonomy file the active taxonomy.

    The daemon validates it completely first; one that does not validate is refused
    and the active taxonomy stays. Check a file beforehand with `taxonomy check`.
    """
    reference = version
    if "/" in version or version.endswith(".toml"):
        # the daemon resolves paths in its own working directory, not ours
        reference = str(Path(version).absolute())
    result = _call(Method.USE_TAXONOMY, {"version": reference})
    _emit(result, as_json, f"taxonomy {result['previous']} -> {result['version']} ({result['origin']})")


@ctl.command()
@_json_option
def reload(as_json: bool) -> None:
    """Re-read the configuration and credentials (as SIGHUP does).

    \b
    Prints what changed, e.g. "reloaded: 1 added (wm-3), none removed, 1 restarted (wm-0), 2 unchanged",
    then "; restart required for: store" when a changed table only a restart applies; with --json
    the daemon's answer: {"result": {"added", "removed", "restarted", "keptDown", "unchanged",
    "restartRequired", "credentialsRotated"}}. A refused reload (the file, a credential file, a
    rotated credential the platform refused) is one line on stderr and exit 1: nothing changed.
    """
    result = _call(Method.RELOAD)
    _emit(result, as_json, reload_summary(result.get("result")))


def reload_summary(result: Any) -> str:
    """One line a person reads from a Reload answer's ``result`` (tolerant of fields it lacks)."""
    if not isinstance(result, dict):
        return "reloaded"

    def sessions(key: str) -> str:
        ids = result.get(key)
        if not isinstance(ids, list) or not ids:
            return f"none {key}"
        shown = ", ".join(str(i) for i in ids[:10]) + (f", +{len(ids) - 10} more" if len(ids) > 10 else "")
        return f"{len(ids)} {key} ({shown})"

    parts = [sessions("added"), sessions("removed"), sessions("restarted")]
    unchanged = result.get("unchanged")
    if isinstance(unchanged, int):
        parts.append(f"{unchanged} unchanged")
    line = "reloaded: " + ", ".join(parts)
    rotated = result.get("credentialsRotated")
    if isinstance(rotated, list) and rotated:
        line += "; credentials rotated: " + ", ".join(str(p) for p in rotated)
    restart = result.get("restartRequired")
    if isinstance(restart, list) and restart:
        line += "; restart required for: " + ", ".join(str(t) for t in restart)
    return line


@ctl.group()
def circuit() -> None:
    """Isolate, close or reset one endpoint's circuit by hand (administrators).

    \b
    An isolated endpoint admits nothing: REST calls to it fail at once, its sessions wait
    in reconnecting with their reconnection horizon standing still, attribute updates stay
    queued. `close` (or the end of --for) ends the isolation; `reset` closes a circuit from
    any state with its counters cleared (after a false trip). An isolation lives in the
    daemon's memory: a restart closes every circuit. Endpoints: `ctl status` lists those in
    use (genesys:api, genesys:oauth, genesys:webmessaging, genesys:streaming, cxone:api,
    cxone:oauth, cxone:agent-sessions). Exit 0 when done, 1 when refused (an unknown
    endpoint, closing a circuit that is open rather than isolated), 2 on bad usage.

    \b
    Examples:
      session-supervisor ctl circuit isolate genesys:webmessaging --for 1800
      session-supervisor ctl circuit close genesys:webmessaging --json
      session-supervisor ctl circuit reset cxone:api
    """


def _circuit_call(method: str, parameters: dict[str, Any], as_json: bool) -> dict[str, Any]:
    try:
        return _call(method, parameters)
    except ApiError as error:
        if as_json:
            _emit({"error": error.name, **error.parameters}, True, "")
        raise


def _circuit_line(result: dict[str, Any]) -> str:
    moved = (
        f"{result['previous']} -> {result['state']}" if result["changed"] else f"{result['state']}, unchanged"
    )
    until = f" for {result['forSeconds']:g} s" if result.get("forSeconds") is not None else ""
    return f"circuit {result['endpoint']}: {moved}{until}"


@circuit.command("isolate")
@click.argument("endpoint", metavar="ENDPOINT", type=UTF8)
@click.option(
    "--for",
    "for_s",
    metavar="S",
    type=click.FloatRange(min=0.0, min_open=True, max=7 * 24 * 3600.0),
    help="End the isolation by itself after S seconds (default: until `close` or `reset`).",
)
@_json_option
def circuit_isolate(endpoint: str, for_s: float | None, as_json: bool) -> None:
    """Isolate ENDPOINT: admit nothing to it until closed, reset, or S seconds (--for)."""
    result = _circuit_call(Method.ISOLATE_CIRCUIT, {"endpoint": endpoint, "forSeconds": for_s}, as_json)
    _emit(result, as_json, _circuit_line(result))


@circuit.command("close")
@click.argument("endpoint", metavar="ENDPOINT", type=UTF8)
@_json_option
def circuit_close(endpoint: str, as_json: bool) -> None:
    """End ENDPOINT's isolation (a closed circuit is left as it is)."""
    result = _circuit_call(Method.CLOSE_CIRCUIT, {"endpoint": endpoint}, as_json)
    _emit(result, as_json, _circuit_line(result))


@circuit.command("reset")
@click.argument("endpoint", metavar="ENDPOINT", type=UTF8)
@_json_option
def circuit_reset(endpoint: str, as_json: bool) -> None:
    """Close ENDPOINT's circuit from any state, its counters cleared (after a false trip)."""
    result = _circuit_call(Method.RESET_CIRCUIT, {"endpoint": endpoint}, as_json)
    _emit(result, as_json, _circuit_line(result))


# attribute updates (docs/attributes.md): ctl attributes set|status, ctl mismatches, ctl resolve
for _verb in (ctl_attributes.attributes, ctl_attributes.mismatches, ctl_attributes.resolve):
    ctl.add_command(_verb)
