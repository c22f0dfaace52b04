"""``ctl sessions`` (list, filtered by selectors), ``ctl sessions add``, ``ctl sessions remove``, and the
selectors ``ctl start`` and ``ctl stop`` share (docs/socket-api.md, "Sessions as data").

**Adding.** ``ctl sessions add ID --kind K [--platform P] [--agent A] [--conversation C]``, ``--spec
JSON`` (one entry as the configuration writes it, camelCase), or ``--from -`` (NDJSON on stdin: one
JSON object per line). Entries go to the daemon in as many ``AddSession`` calls as needed, each at
most :data:`~supervisor.api.protocol.MAX_SESSIONS_PER_CALL` entries and one frame, over one
connection. Every entry is answered on its own (a line; with ``--json`` one JSON object per line,
``line`` naming the stdin line); exit 0 only when every entry was added, 1 when any was refused.

**Selectors.** ``--state``, ``--reason`` (the termination reason, e.g. RETRY_EXHAUSTED), ``--platform``,
``--kind``, ``--origin`` (``config`` or ``api``), ``--tenant`` (a ``[tenants.NAME]``), each repeatable (any of its values), all of them
together (every one must match), or ``--all``. ``ctl start`` and ``ctl stop`` act on what matches,
one call per session (a start's first attempt is admitted by its endpoint, so a mass start is paced
as start-up is); ``--all`` or more than :data:`CONFIRM_ABOVE` matches needs ``--yes``; ``--dry-run``
lists what would be affected and changes nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click
import msgspec

from supervisor.api.client import Client
from supervisor.api.protocol import MAX_MESSAGE_BYTES, MAX_SESSIONS_PER_CALL, Method
from supervisor.cli.common import exit_code_of
from supervisor.cli.socket_option import UTF8, resolve_socket
from supervisor.config import SessionKind
from supervisor.errors import ApiError
from supervisor.events import TerminationReason
from supervisor.vocabulary import Platform, SessionState

__all__ = [
    "CONFIRM_ABOVE",
    "Selection",
    "act",
    "act_options",
    "add_command",
    "remove_command",
    "selected",
    "selector_options",
]

#: a selector matching more sessions than this needs --yes (as --all always does)
CONFIRM_ABOVE: Final = 100
#: the bytes of one call's entries: the frame's 64 KiB less room for the call around them
_CALL_BYTES: Final = MAX_MESSAGE_BYTES - 1024
_STATES = tuple(s.value for s in SessionState)
_PLATFORMS = tuple(p.value for p in Platform)
_KINDS = tuple(k.value for k in SessionKind)
_REASONS = tuple(r.value for r in TerminationReason)
_ORIGINS = ("config", "api")


def _short(name: str) -> str:
    """An error's own name (``SessionExists``), as the other verbs' refusals print it."""
    return name.rpartition(".")[2]


def _write(obj: Any) -> None:
    sys.stdout.buffer.write(msgspec.json.encode(obj) + b"\n")
    sys.stdout.flush()


def _client() -> Client:
    path = resolve_socket(click.get_current_context().find_object(Path), "control")
    return Client(path)


def _report(result: dict[str, Any], done: object, line: str, as_json: bool) -> bool:
    """Print one session's answer of an add or a remove: the object with --json, else ``line`` when it
    was done; a refusal's one error line on stderr either way. Whether it was done."""
    if as_json:
        _write(result)
    elif done:
        click.echo(line)
    if not done:
        problem = f"{_short(result['error'])}: {result['problem']}"
        click.echo(f"session-supervisor: error: {problem}", err=True)
    return bool(done)


def _refused_call(error: ApiError, as_json: bool) -> click.exceptions.Exit:
    if as_json:
        _write({"error": error.name, **error.parameters})
    click.echo(f"session-supervisor: error: {error}", err=True)
    return click.exceptions.Exit(exit_code_of(error))


# ---------------------------------------------------------------------------------------- selectors


@dataclass(frozen=True, slots=True)
class Selection:
    """What ``--state`` ... ``--origin`` and ``--all`` select; empty: nothing selected."""

    states: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    origins: tuple[str, ...] = ()
    everything: bool = False
    # named tenants (a row's ``tenant``; the default tenant's rows have none)
    tenants: tuple[str, ...] = ()

    @property
    def given(self) -> bool:
        return self.everything or any(
            (self.states, self.reasons, self.platforms, self.kinds, self.origins, self.tenants)
        )

    def matches(self, row: dict[str, Any]) -> bool:
        if self.everything:
            return True
        termination = row.get("termination") or {}
        checks = (
            (self.states, row.get("state")),
            (self.reasons, termination.get("reason")),
            (self.platforms, row.get("platform")),
            (self.kinds, row.get("kind")),
            (self.origins, row.get("origin", "config")),
            (self.tenants, row.get("tenant")),
        )
        return all(not wanted or value in wanted for wanted, value in checks)


def selector_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The selectors, for ``sessions`` (which lists) and ``start`` / ``stop`` (which act)."""
    for option in reversed(
        (
            click.option(
                "--state", "states", multiple=True, type=click.Choice(_STATES), help="Sessions in this state."
            ),
            click.option(
                "--reason",
                "reasons",
                multiple=True,
                type=click.Choice(_REASONS),
                help="Ended for this reason.",
            ),
            click.option("--platform", "platforms", multiple=True, type=click.Choice(_PLATFORMS)),
            click.option("--kind", "kinds", multiple=True, type=click.Choice(_KINDS)),
            click.option(
                "--origin",
                "origins",
                multiple=True,
                type=click.Choice(_ORIGINS),
                help="config: the file's; api: added over the control socket.",
            ),
            click.option(
                "--tenant",
                "tenants",
                multiple=True,
                metavar="NAME",
                type=UTF8,
                help="Sessions of this tenant ([tenants.NAME]).",
            ),
        )
    ):
        func = option(func)
    return func


def act_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--all``, ``--yes`` and ``--dry-run`` of ``start`` and ``stop``."""
    func = click.option("--dry-run", is_flag=True, help="List what would be affected; change nothing.")(func)
    func = click.option(
        "--yes",
        is_flag=True,
        help=f"Confirm --all, or a selector matching more than {CONFIRM_ABOVE} sessions.",
    )(func)
    return click.option("--all", "everything", is_flag=True, help="Every session.")(func)


def selected(client: Client, selection: Selection) -> list[dict[str, Any]]:
    """The rows of every session the selection matches, in the daemon's order."""
    rows = client.call(Method.LIST_SESSIONS, {})["sessions"]
    return [row for row in rows if selection.matches(row)]


def act(
    verb: str,
    method: str,
    ids: tuple[str, ...],
    selection: Selection,
    *,
    yes: bool,
    dry_run: bool,
    as_json: bool,
    line: Callable[[dict[str, Any]], str],
) -> None:
    """``ctl start`` / ``ctl stop`` on ids and selected sessions: one call and one answer per session."""
    if not ids and not selection.given:
        raise click.UsageError(
            "give session ids, a selector (--state, --reason, --platform, --kind, --origin, --tenant) or --all"
        )
    refused = 0
    codes: set[int] = set()
    with _client() as client:
        # ids alone act on those ids: an empty selection matches every row, so it is asked only when given
        chosen = selected(client, selection) if selection.given else []
        targets = list(dict.fromkeys([*ids, *(row["sessionId"] for row in chosen)]))
        if (
            selection.given
            and (selection.everything or len(targets) > CONFIRM_ABOVE)
            and not yes
            and not dry_run
        ):
            why = (
                "--all"
                if selection.everything
                else f"{len(targets)} sessions match (more than {CONFIRM_ABOVE})"
            )
            raise click.UsageError(f"{why}: add --yes to {verb} them (or --dry-run to list them)")
        for session_id in targets:
            if dry_run:
                (_write if as_json else lambda o: click.echo(f"would {verb} {o['sessionId']}"))(
                    {"sessionId": session_id, "dryRun": True, "verb": verb}
                )
                continue
            try:
                result = client.call(method, {"sessionId": session_id})
            except ApiError as error:
                refused += 1
                codes.add(exit_code_of(error))
                if as_json:
                    _write({"sessionId": session_id, "error": error.name, **error.parameters})
                else:
                    click.echo(f"session-supervisor: error: {error}", err=True)
                continue
            _write(result) if as_json else click.echo(line(result))
    if refused:
        # every refusal NotOwner: its exit (69); any other refusal among them: 1
        raise click.exceptions.Exit(codes.pop() if len(codes) == 1 else 1)


# ---------------------------------------------------------------------------------------- adding


def _batches(entries: Iterable[tuple[int, Any]]) -> Iterator[list[tuple[int, Any]]]:
    """Entries in calls of at most MAX_SESSIONS_PER_CALL entries and one frame's bytes each."""
    batch: list[tuple[int, Any]] = []
    size = 0
    for number, entry in entries:
        encoded = len(msgspec.json.encode(entry)) + 1
        if batch and (len(batch) >= MAX_SESSIONS_PER_CALL or size + encoded > _CALL_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((number, entry))
        size += encoded
    if batch:
        yield batch


def _stdin_entries(refuse: Callable[[int, str], None]) -> Iterator[tuple[int, Any]]:
    """Each stdin line's JSON object (blank lines skipped); a line that is not one is refused here."""
    for number, raw in enumerate(sys.stdin.buffer, start=1):
        if not raw.strip():
            continue
        try:
            entry = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            refuse(number, f"stdin line {number}: not JSON: {exc}")
            continue
        if not isinstance(entry, dict):
            refuse(number, f"stdin line {number}: expected a JSON object (a session entry)")
            continue
        yield number, entry


def add_command() -> click.Command:
    @click.command("add")
    @click.argument("session_id", metavar="[ID]", required=False, type=UTF8)
    @click.option("--kind", type=click.Choice(_KINDS), help="webmessaging, notifications or agent-session.")
    @click.option("--platform", type=click.Choice(_PLATFORMS), help="Implied by --kind; checked when given.")
    @click.option("--agent", metavar="A", type=UTF8, help="The agent id (agentId).")
    @click.option("--conversation", metavar="C", type=UTF8, help="The conversation id (conversationId).")
    @click.option(
        "--tenant",
        metavar="NAME",
        type=UTF8,
        help="The tenant ([tenants.NAME]; default: [platforms.*]); with --spec/--from, for entries naming none.",
    )
    @click.option("--spec", "spec_json", metavar="JSON", type=UTF8, help="One entry as a JSON object.")
    @click.option("--from", "source", metavar="-", type=UTF8, help="'-': one JSON object per line on stdin.")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object per session on stdout.")
    def add(
        session_id: str | None,
        kind: str | None,
        platform: str | None,
        agent: str | None,
        conversation: str | None,
        tenant: str | None,
        spec_json: str | None,
        source: str | None,
        as_json: bool,
    ) -> None:
        """Add sessions at run time: kept in the daemon's store (they survive restarts and reloads),
        validated as the configuration's [[sessions]] entries are, started paced by admission.

        \b
        ID --kind K [--platform P] [--agent A] [--conversation C] [--tenant T]   one session from flags
        --spec '{"id": "wm-9", "kind": "webmessaging"}'            one entry as JSON
        --from -                                                  NDJSON on stdin, any number
        Exit 0 when every session was added, 1 when any was refused (each refusal is a line).
        """
        modes = sum((session_id is not None or kind is not None, spec_json is not None, source is not None))
        if modes != 1:
            raise click.UsageError("give ID --kind K, or --spec JSON, or --from - (one of them)")
        failures = 0

        def refuse_locally(number: int, problem: str) -> None:
            nonlocal failures
            failures += 1
            if as_json:
                _write({"line": number, "added": False, "error": "InvalidSessionSpec", "problem": problem})
            click.echo(f"session-supervisor: error: {problem}", err=True)

        entries: Iterable[tuple[int, Any]]
        if source is not None:
            if source != "-":
                raise click.UsageError("--from: only '-' (standard input) is read")
            entries = _stdin_entries(refuse_locally)
        elif spec_json is not None:
            try:
                entry = msgspec.json.decode(spec_json)
            except msgspec.DecodeError as exc:
                raise click.UsageError(f"--spec: not JSON: {exc}") from None
            if not isinstance(entry, dict):
                raise click.UsageError("--spec: expected a JSON object (a session entry)")
            entries = [(1, entry)]
        else:
            if session_id is None or kind is None:
                raise click.UsageError("give the session's ID and --kind")
            fields = {"id": session_id, "kind": kind, "platform": platform, "agentId": agent}
            fields["conversationId"] = conversation
            entries = [(1, {k: v for k, v in fields.items() if v is not None})]
        if tenant is not None:
            entries = ((n, {"tenant": tenant, **e}) for n, e in entries)
        with _client() as client:
            for batch in _batches(entries):
                try:
                    answer = client.call(Method.ADD_SESSION, {"sessions": [entry for _, entry in batch]})
                except ApiError as error:
                    raise _refused_call(error, as_json) from None
                for (number, _), result in zip(batch, answer["results"], strict=True):
                    if source is not None:
                        result = {"line": number, **result}
                    done = result.get("added")
                    failures += not _report(
                        result, done, f"added {result.get('sessionId')}: {result.get('state')}", as_json
                    )
        if failures:
            raise click.exceptions.Exit(1)

    return add


def remove_command() -> click.Command:
    @click.command("remove")
    @click.argument("session_ids", metavar="ID...", nargs=-1, required=True, type=UTF8)
    @click.option("--json", "as_json", is_flag=True, help="One JSON object per session on stdout.")
    def remove(session_ids: tuple[str, ...], as_json: bool) -> None:
        """Remove sessions added at run time: each closed as `stop` closes it, and forgotten (it stays
        gone after a restart). A session the configuration file declares is refused: edit the file.
        Exit 0 when every one was removed, 1 otherwise."""
        failures = 0
        ids = list(session_ids)
        with _client() as client:
            for start in range(0, len(ids), MAX_SESSIONS_PER_CALL):
                chunk = ids[start : start + MAX_SESSIONS_PER_CALL]
                try:
                    answer = client.call(Method.REMOVE_SESSION, {"sessionIds": chunk})
                except ApiError as error:
                    raise _refused_call(error, as_json) from None
                for result in answer["results"]:
                    done = result.get("removed")
                    failures += not _report(result, done, f"removed {result.get('sessionId')}", as_json)
        if failures:
            raise click.exceptions.Exit(1)

    return remove
