"""``session-supervisor classify``: NDJSON RawError envelopes in, SdkErrorEvent JSON lines out."""

from __future__ import annotations

import sys
from collections import Counter
from typing import IO, TYPE_CHECKING

import click
import msgspec
from click.core import ParameterSource

from supervisor.cli.common import stderr_console, stdout_console
from supervisor.cli.inputs import InputFile, NdjsonLines, active_taxonomy, taxonomy_option
from supervisor.errors import EnvelopeError
from supervisor.taxonomy import Classifier, SdkErrorEvent
from supervisor.taxonomy.samples import sample_envelopes

if TYPE_CHECKING:
    from rich.console import Console

_encoder = msgspec.json.Encoder()
#: --format table keeps every event for the table: past this many, the input is not read further
TABLE_MAX_ROWS = 10_000


def _render_table(events: list[SdkErrorEvent]) -> None:
    from rich.table import Table  # here: the default JSON output never pays for rich

    table = Table(
        title="Classified raw errors (taxonomy " + (events[0].taxonomy_version if events else "?") + ")"
    )
    for column in ("#", "source", "raw", "code", "class", "scope", "retries", "trigger"):
        table.add_column(column, overflow="fold")
    for i, ev in enumerate(events, 1):
        raw = " ".join(str(x) for x in (ev.raw_status, ev.raw_code) if x is not None)
        table.add_row(
            str(i),
            ev.source,
            raw,
            ev.code,
            ev.taxonomy_class.value,
            ev.scope.value,
            str(ev.max_retry_budget),
            ev.trigger.value if ev.trigger else "",
        )
    console = stdout_console()
    console.print(table)
    by_class = Counter(ev.taxonomy_class.value for ev in events)
    triggers = Counter(ev.trigger.value for ev in events if ev.trigger)
    console.print(
        "by class: "
        + ", ".join(f"{k} {v}" for k, v in sorted(by_class.items()))
        + (
            "; fail-fast triggers: " + ", ".join(f"{k} {v}" for k, v in sorted(triggers.items()))
            if triggers
            else ""
        )
    )


@click.command()
@click.argument("source", type=InputFile(), default="-", metavar="[FILE|-]")
@taxonomy_option
@click.option("--sample", is_flag=True, help="Classify the bundled sample of real-shaped raw errors instead.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "table"]),
    default="json",
    show_default=True,
    help="json: one SdkErrorEvent per line; table: a summary table for people.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Same as --format json (the default), as the other commands spell it.",
)
def classify(source: IO[bytes], taxonomy_ref: str | None, sample: bool, fmt: str, as_json: bool) -> None:
    """Classify RawError envelopes (NDJSON) into SdkErrorEvents.

    Reads one JSON envelope per line from FILE (or stdin) and prints one
    SdkErrorEvent JSON per line, in order. A line that is not JSON or not a valid
    envelope gets one stderr line naming its line number and the problem; the other
    lines are still classified, and the exit code is then 1. Blank lines are skipped.
    A line may be at most 1 MiB and nest at most 64 levels; reading stops at a longer
    line (it may never end). --format table holds at most 10,000 envelopes.

    \b
    Example (one envelope per line: an envelope split over two lines is two bad lines):
      echo '{"platform":"genesys","channel":"rest","status":429,"headers":{"Retry-After":"3"}}' | session-supervisor classify

    The envelope format is documented in docs/taxonomy.md.
    """
    if as_json:
        if (
            fmt == "table"
            and click.get_current_context().get_parameter_source("fmt") is not ParameterSource.DEFAULT
        ):
            raise click.UsageError("--json and --format table contradict each other")
        fmt = "json"
    classifier = Classifier(active_taxonomy(taxonomy_ref))
    reader = NdjsonLines(source)
    lines = sample_envelopes() if sample else reader
    errors = 0
    events: list[SdkErrorEvent] = []
    out = sys.stdout.buffer
    err: Console | None = None

    def complain(line: str) -> None:
        nonlocal err
        if err is None:  # made on the first bad line: a clean input never imports rich
            err = stderr_console()
        err.print(f"session-supervisor: {line}", markup=False)

    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = classifier.classify_json(line)
        except EnvelopeError as exc:
            errors += 1
            complain(f"line {number}: {exc}")
            continue
        if fmt == "table":
            if len(events) == TABLE_MAX_ROWS:
                errors += 1
                complain(
                    f"line {number}: --format table holds at most {TABLE_MAX_ROWS} "
                    "envelopes; the input is not read past it (--format json streams any number)"
                )
                break
            events.append(event)
        else:
            out.write(_encoder.encode(event.as_json()) + b"\n")
    if reader.cut_line is not None:
        errors += 1
        complain(reader.cut_message())
    out.flush()
    if fmt == "table":
        _render_table(events)
    if errors:
        raise SystemExit(1)
