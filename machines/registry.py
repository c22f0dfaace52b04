"""One circuit breaker per endpoint, shared by every session that talks to it."""

from __future__ import annotations

import random

from machines.circuit import Circuit, CircuitConfig
from machines.pacing import Pacer, PacingConfig
from machines.retry_budget import RetryBudget
from supervisor.clock import Clock, Rng


class CircuitRegistry:
    """Creates each endpoint's :class:`Circuit` on first use; ids are ``circuit:<endpoint>``."""

    __slots__ = ("_circuits", "_clock", "_config", "_rng")

    def __init__(self, clock: Clock, config: CircuitConfig | None = None, rng: Rng | None = None) -> None:
        self._clock = clock
        self._config = config or CircuitConfig()
        self._rng: Rng = rng if rng is not None else random.Random()
        self._circuits: dict[str, Circuit] = {}

    def get(self, endpoint: str) -> Circuit:
        circuit = self._circuits.get(endpoint)
        if circuit is None:
            circuit = self._circuits[endpoint] = Circuit(
                f"circuit:{endpoint}", self._clock, self._rng, self._config
            )
        return circuit

    def configure(self, config: CircuitConfig) -> None:
        """Circuits created from now on use ``config``; existing ones keep theirs (and their state)."""
        self._config = config

    def all(self) -> dict[str, Circuit]:
        return dict(self._circuits)


class Admission:
    """Per-endpoint admission beyond the seed (issue 15): connect pacers, REST pacers, retry budgets.

    ``connect`` paces connection attempts (handshakes, session starts) and starts in slow start
    (start-up is a storm too); ``rest`` paces REST calls and engages only at the first throttle;
    ``budget`` caps retries across calls. With ``adaptive`` off there are no pacers at all.
    """

    __slots__ = ("_budget", "_budgets", "_clock", "_connect", "_connects", "_rest", "_rests")

    def __init__(
        self,
        clock: Clock,
        *,
        connect: PacingConfig | None,
        rest: PacingConfig | None,
        budget: tuple[float, float] | None,
    ) -> None:
        self._clock = clock
        self._connect = connect
        self._rest = rest
        self._budget = budget
        self._connects: dict[str, Pacer] = {}
        self._rests: dict[str, Pacer] = {}
        self._budgets: dict[str, RetryBudget] = {}

    def connect(self, endpoint: str) -> Pacer | None:
        if self._connect is None:
            return None
        pacer = self._connects.get(endpoint)
        if pacer is None:
            pacer = self._connects[endpoint] = Pacer(endpoint, self._clock, self._connect)
        return pacer

    def rest(self, endpoint: str) -> Pacer | None:
        if self._rest is None:
            return None
        pacer = self._rests.get(endpoint)
        if pacer is None:
            pacer = self._rests[endpoint] = Pacer(endpoint, self._clock, self._rest)
        return pacer

    def budget(self, endpoint: str) -> RetryBudget | None:
        if self._budget is None:
            return None
        budget = self._budgets.get(endpoint)
        if budget is None:
            ratio, min_per_s = self._budget
            budget = self._budgets[endpoint] = RetryBudget(self._clock, ratio=ratio, min_per_s=min_per_s)
        return budget

    def pacers(self) -> dict[str, Pacer]:
        """Every pacer made so far, by ``connect:<endpoint>`` / ``rest:<endpoint>``."""
        out = {f"connect:{k}": v for k, v in self._connects.items()}
        out.update({f"rest:{k}": v for k, v in self._rests.items()})
        return out
