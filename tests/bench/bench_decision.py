"""Decision-core cost: classify per envelope and backoff per decision (docs/architecture.md, "Targets").

Run: ``./dev bench -k decision`` or ``.venv/bin/python tests/bench/bench_decision.py``.
Targets: classify ≤ 20 µs per envelope (docs/architecture.md, "Targets"); backoff ≤ 2 µs per decision (ours).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import msgspec
import pytest

from supervisor.retry import decide_retry
from supervisor.taxonomy import Classifier, Jitter, envelope_from_json, load_taxonomy
from supervisor.taxonomy.samples import sample_envelopes

ROUNDS = 7


def _per_call_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """(best, median) microseconds per call over ROUNDS rounds of `calls` calls."""
    results = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        results.append((time.perf_counter() - start) / calls * 1e6)
    return min(results), statistics.median(results)


def measure() -> dict[str, tuple[float, float]]:
    tax = load_taxonomy("v1")
    classifier = Classifier(tax)
    lines = sample_envelopes()
    raws = [envelope_from_json(line) for line in lines]
    out: dict[str, tuple[float, float]] = {}

    idx = [0]

    def classify_parsed() -> object:
        i = idx[0] = (idx[0] + 1) % len(raws)
        return classifier.classify(raws[i])

    def classify_line() -> object:
        i = idx[0] = (idx[0] + 1) % len(lines)
        return classifier.classify_json(lines[i])

    def classify_line_to_json() -> object:
        i = idx[0] = (idx[0] + 1) % len(lines)
        return classifier.classify_json(lines[i]).as_json()

    out["classify (parsed envelope)"] = _per_call_us(classify_parsed, 20_000)
    out["classify (NDJSON line → event)"] = _per_call_us(classify_line, 20_000)
    out["classify (NDJSON line → event → JSON dict)"] = _per_call_us(classify_line_to_json, 20_000)

    rng = random.Random(7)
    for jitter in Jitter:
        policy = msgspec.structs.replace(tax.policies["rate_limit"], jitter=jitter)
        attempt = [0]

        def backoff(policy=policy, attempt=attempt) -> object:  # type: ignore[no-untyped-def]
            attempt[0] = (attempt[0] + 1) % 2
            return decide_retry(policy, attempt[0], rng, retry_after_ms=1500)

        out[f"backoff decision ({jitter.value})"] = _per_call_us(backoff, 100_000)
    return out


@pytest.mark.bench
def test_decision_costs() -> None:
    results = measure()
    report(results)
    assert results["classify (NDJSON line → event)"][0] <= 20.0
    for name, (best, _) in results.items():
        if name.startswith("backoff"):
            assert best <= 2.0, name


def report(results: dict[str, tuple[float, float]]) -> None:
    print()
    print(f"{'measurement':48} {'best µs':>9} {'median µs':>10}")
    for name, (best, median) in results.items():
        print(f"{name:48} {best:9.2f} {median:10.2f}")


if __name__ == "__main__":
    report(measure())
