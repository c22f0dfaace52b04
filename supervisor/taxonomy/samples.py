"""The bundled sample of real-shaped raw errors (used by `classify --sample` and the benchmarks)."""

from __future__ import annotations

from importlib import resources


def sample_envelopes() -> list[bytes]:
    """One NDJSON line per documented wire shape, from supervisor/taxonomy/data/samples.ndjson."""
    data = resources.files("supervisor.taxonomy") / "data" / "samples.ndjson"
    return [line for line in data.read_bytes().splitlines() if line.strip()]
