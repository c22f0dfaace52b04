"""``session-supervisor policy show``: the effective retry policies of the active taxonomy."""

from __future__ import annotations

import sys
from typing import Any

import click
import msgspec
from rich.table import Table

from supervisor.cli.common import stdout_console
from supervisor.cli.inputs import active_taxonomy, taxonomy_option
from supervisor.taxonomy import Taxonomy


def effective_policies(tax: Taxonomy) -> list[dict[str, Any]]:
    """Each policy with the semantic codes that use it, in file order."""
    out = []
    for name, pol in tax.policies.items():
        codes = sorted(code for code, spec in tax.codes.items() if spec.policy.name == name)
        out.append(
            {
                "name": name,
                "maxRetries": pol.max_retries,
                "baseDelayMs": pol.base_delay_ms,
                "maxDelayMs": pol.max_delay_ms,
                "jitter": pol.jitter.value,
                "honorsRetryAfter": pol.honors_retry_after,
                "retryAfterCeilingMs": pol.retry_after_ceiling_ms if pol.honors_retry_after else None,
                "codes": codes,
                "description": pol.description,
                "taxonomyVersion": tax.version,
            }
        )
    return out


@click.group()
def policy() -> None:
    """Inspect retry policies (budgets, backoff, Retry-After handling)."""


@policy.command("show")
@taxonomy_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of policy objects.")
def show(taxonomy_ref: str | None, as_json: bool) -> None:
    """Print the effective retry policies and the semantic codes routed to each.

    With --json: a list of objects with name, maxRetries, baseDelayMs, maxDelayMs,
    jitter, honorsRetryAfter, retryAfterCeilingMs and codes.
    """
    policies = effective_policies(active_taxonomy(taxonomy_ref))
    if as_json:
        sys.stdout.buffer.write(msgspec.json.encode(policies) + b"\n")
        return
    table = Table(title=f"Retry policies (taxonomy {policies[0]['taxonomyVersion'] if policies else '?'})")
    for column in ("policy", "retries", "base", "max", "jitter", "Retry-After", "codes"):
        table.add_column(column, overflow="fold")
    for p in policies:
        table.add_row(
            p["name"],
            str(p["maxRetries"]),
            f"{p['baseDelayMs'] / 1000:g} s",
            f"{p['maxDelayMs'] / 1000:g} s",
            p["jitter"],
            f"min delay, ≤ {p['retryAfterCeilingMs'] / 1000:g} s" if p["honorsRetryAfter"] else "ignored",
            ", ".join(p["codes"]),
        )
    stdout_console().print(table)
