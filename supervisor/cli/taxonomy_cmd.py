"""``session-supervisor taxonomy check|diff``: validate a taxonomy file, compare two versions."""

from __future__ import annotations

import sys
from typing import IO, Any

import click
import msgspec

from supervisor.cli.common import stderr_console
from supervisor.cli.inputs import InputFile, NdjsonLines
from supervisor.taxonomy import load_taxonomy, shipped_versions
from supervisor.taxonomy.diff import ReplayReport, diff_codes, diff_responses, diff_tables, replay


@click.group()
def taxonomy() -> None:
    """Check taxonomy files and compare versions before switching.

    A taxonomy is a versioned TOML file (docs/taxonomy.md) mapping raw platform errors
    to semantic codes, classes, scopes, retry policies and fail-fast triggers. The
    shipped versions are named (v1); any other file is given by path.
    """


@taxonomy.command("check")
@click.argument("path", metavar="PATH|VERSION")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary instead of text.")
def check(path: str, as_json: bool) -> None:
    """Validate a taxonomy file: exit 0 when valid, 1 with the located error otherwise.

    An overlay (a file with ``extends = "v2"``) is checked laid over its base.

    \b
    Example:
      session-supervisor taxonomy check my-taxonomy.toml
    """
    tax = load_taxonomy(path)
    summary = {
        "valid": True,
        "file": tax.origin,
        "version": tax.version,
        "extends": tax.extends,
        "codes": len(tax.codes),
        "rules": len(tax.rules),
        "policies": len(tax.policies),
        "closeCodes": len(tax.close_codes),
        "exceptions": len(tax.exceptions),
    }
    if as_json:
        sys.stdout.buffer.write(msgspec.json.encode(summary) + b"\n")
    else:
        extends = f" (an overlay of {tax.extends})" if tax.extends is not None else ""
        click.echo(
            f"ok: {tax.origin} is taxonomy {tax.version}{extends}: {len(tax.codes)} codes, {len(tax.rules)} rules, "
            f"{len(tax.policies)} policies, {len(tax.close_codes)} close codes, {len(tax.exceptions)} exceptions"
        )


@taxonomy.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option(
    "--replay", "replay_file", type=InputFile(), help="NDJSON RawError envelopes to classify under both."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--fail-on-diff", is_flag=True, help="Exit 1 when any routing differs (for CI gates).")
def diff(a: str, b: str, replay_file: IO[bytes] | None, as_json: bool, fail_on_diff: bool) -> None:
    """List what routes differently between taxonomy A and taxonomy B.

    Shows semantic codes added, removed or changed (class, scope, trigger, policy), close
    codes and exception names mapped elsewhere, responses whose required fields changed
    (what a response must carry before a session goes active), and with --replay every recorded
    envelope whose classification would change. Run this before switching the active
    version (seed section 1: no silent routing changes).

    \b
    Example:
      session-supervisor taxonomy diff v1 ./v2.toml --replay recorded.ndjson
    """
    ta, tb = load_taxonomy(a), load_taxonomy(b)
    codes = diff_codes(ta, tb)
    tables = diff_tables(ta, tb)
    responses = diff_responses(ta, tb)
    report = ReplayReport()
    if replay_file is not None:
        # bounded lines: a line past the cap is a problem naming it, and reading stops there
        reader = NdjsonLines(replay_file)
        report = replay(ta, tb, reader)
        if reader.cut_line is not None:
            report.problems.append(reader.cut_message())
            report.problems_total += 1
    replayed, problems = report.changes, report.problems
    if report.problems_total > len(problems):
        problems = [*problems, f"{report.problems_total - len(problems)} more lines were not valid envelopes"]
    err = stderr_console()
    for problem in problems:
        err.print(f"session-supervisor: {problem}", markup=False)
    if as_json:
        doc = {
            "a": {"file": ta.origin, "version": ta.version},
            "b": {"file": tb.origin, "version": tb.version},
            "codes": [msgspec.to_builtins(c) for c in codes],
            "tables": [msgspec.to_builtins(t) for t in tables],
            "responses": [msgspec.to_builtins(r) for r in responses],
            "replay": [msgspec.to_builtins(r) for r in replayed],
            "replayChangedTotal": report.changed_total,
        }
        sys.stdout.buffer.write(msgspec.json.encode(doc) + b"\n")
    else:
        # one difference per line, never folded: scripts grep and diff these lines
        click.echo(f"taxonomy diff {ta.origin} ({ta.version}) → {tb.origin} ({tb.version})")
        if not (codes or tables or responses or replayed):
            click.echo("no routing differences")
        for c in codes:
            click.echo(f"code {c.code}: {_changed(c.change, c.before, c.after)}")
        for t in tables:
            click.echo(f"{t.table} {t.key}: {t.before} → {t.after}")
        for rc in responses:
            click.echo(f"response {rc.response}: {_changed(rc.change, rc.before, rc.after)}")
        for r in replayed:
            click.echo(f"replay line {r.line}: {_changed('changed', r.before, r.after)}")
        if report.changed_total > len(replayed):
            click.echo(f"… and {report.changed_total - len(replayed)} more lines routed differently")
    if problems or (fail_on_diff and (codes or tables or responses or replayed)):
        raise SystemExit(1)


def _changed(change: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """``key: old → new, ...`` for the keys that changed, else the kind of change (added, removed)."""
    if change != "changed" or not before or not after:
        return change
    return ", ".join(f"{k}: {before[k]} → {after[k]}" for k in before if before[k] != after[k])


@taxonomy.command("list")
def list_versions() -> None:
    """List the taxonomy versions shipped with the package."""
    for name in shipped_versions():
        click.echo(name)
