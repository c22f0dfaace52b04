"""The shadow taxonomy: a candidate version classifies live failures too, and never routes. Pure.

``[taxonomy] shadow = VERSION`` (docs/taxonomy.md, "Shadow"): every failure the daemon classified with
the active version is classified again with the candidate; when the two route it differently (the
fields ``taxonomy diff --replay`` compares: code, class, scope, budget, trigger, policy, flags) that
is a divergence. The daemon routes by the active version only.

Divergences are counted, every one (:attr:`DivergenceCounter.totals`, the metric), and reported at
most once per (active code, shadow code) pair per period (a minute): the first at once, with
``count`` 1; those that follow within the period are held and reported together, with their count,
when the period is over (:meth:`DivergenceCounter.due`, or the next divergence of the pair after
it). So a storm of 429s the candidate routes elsewhere is one report a minute, never one per failure,
and the counts of the reports add up to every divergence. Time is the injected clock's.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.clock import Clock
from supervisor.taxonomy.classifier import Classifier
from supervisor.taxonomy.diff import event_routing
from supervisor.taxonomy.envelope import RawError
from supervisor.taxonomy.model import SdkErrorEvent
from supervisor.taxonomy.rules import Taxonomy

__all__ = ["PERIOD_S", "Divergence", "DivergenceCounter", "Shadow"]

#: at most one report per (active code, shadow code) pair this often
PERIOD_S = 60.0

Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Divergence:
    """``count`` failures the active version routed to ``active_code`` and the shadow to
    ``shadow_code`` (or the same code, routed otherwise), since the pair's last report."""

    active_code: str
    shadow_code: str
    count: int
    #: what differs, as ``taxonomy diff`` names it (code, taxonomyClass, policy, ...), the last one seen
    changed: tuple[str, ...]


@dataclass(slots=True)
class _PairState:
    reported_at: float
    held: int
    changed: tuple[str, ...]


class DivergenceCounter:
    """Counts divergences by pair; says when a pair is to be reported (module docstring)."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        #: every divergence, by pair, since the start (bounded: pairs of codes)
        self.totals: dict[Pair, int] = {}
        self._pairs: dict[Pair, _PairState] = {}

    def add(self, pair: Pair, changed: tuple[str, ...], now: float) -> Divergence | None:
        """Count one divergence at ``now`` (monotonic seconds); the report to make now, if any."""
        self.totals[pair] = self.totals.get(pair, 0) + 1
        state = self._pairs.get(pair)
        if state is not None and now - state.reported_at < self.period_s:
            state.held += 1
            state.changed = changed
            return None
        count = 1 + (state.held if state is not None else 0)
        self._pairs[pair] = _PairState(now, 0, changed)
        return Divergence(pair[0], pair[1], count, changed)

    def due(self, now: float) -> list[Divergence]:
        """The held divergences of every pair whose period is over at ``now``, one report per pair."""
        out: list[Divergence] = []
        for pair, state in list(self._pairs.items()):
            if now - state.reported_at < self.period_s:
                continue
            if state.held:
                out.append(Divergence(pair[0], pair[1], state.held, state.changed))
                state.reported_at, state.held = now, 0
            else:
                del self._pairs[pair]  # quiet for a period: its next divergence is reported at once
        return out

    def drain(self) -> list[Divergence]:
        """Every held divergence, reported now whatever its period (the daemon is stopping)."""
        out = [
            Divergence(pair[0], pair[1], state.held, state.changed)
            for pair, state in self._pairs.items()
            if state.held
        ]
        self._pairs.clear()
        return out

    @property
    def held(self) -> int:
        """Divergences counted and not yet reported."""
        return sum(state.held for state in self._pairs.values())


class Shadow:
    """A candidate taxonomy beside the active one: classifies again, compares, counts."""

    def __init__(self, taxonomy: Taxonomy, clock: Clock, period_s: float = PERIOD_S) -> None:
        self.classifier = Classifier(taxonomy, clock)
        self.counter = DivergenceCounter(period_s)
        self._clock = clock

    @property
    def taxonomy(self) -> Taxonomy:
        return self.classifier.taxonomy

    def compare(self, raw: RawError, active: SdkErrorEvent) -> Divergence | None:
        """Classify ``raw`` with the shadow; a report to make now when it routes ``active`` otherwise."""
        shadow = self.classifier.classify(raw, observe=False)
        before, after = event_routing(active), event_routing(shadow)
        if before == after:
            return None
        changed = tuple(key for key in before if before[key] != after[key])
        return self.counter.add((active.code, shadow.code), changed, self._clock.monotonic())

    def due(self) -> list[Divergence]:
        return self.counter.due(self._clock.monotonic())
