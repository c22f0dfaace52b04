"""The pure retry policy: the seed's formula, full and decorrelated jitter, Retry-After, max-age."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.retry import backoff_delay_ms, decide_retry, parse_max_age_ms, parse_retry_after_ms
from supervisor.retry.backoff import GiveUpReason
from supervisor.taxonomy import Jitter, RetryPolicy
from tests.strategies import text

NOW = 1_715_679_131.0  # 2024-05-14T09:32:11Z


class FixedRng:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def policy(jitter: Jitter = Jitter.ADDITIVE, **kw: object) -> RetryPolicy:
    args: dict[str, object] = {"name": "p", "max_retries": 3, "base_delay_ms": 1000, "max_delay_ms": 16000}
    args.update(kw)
    return RetryPolicy(jitter=jitter, **args)  # type: ignore[arg-type]


class TestSeedFormula:
    """seed section 2: delay = base * 2^attempt + U(0, base), capped at max."""

    @pytest.mark.parametrize(
        ("attempt", "u", "expected"),
        [
            (0, 0.0, 1000),
            (0, 0.999, 1999),
            (1, 0.5, 2500),
            (2, 0.25, 4250),
            (3, 0.0, 8000),
            (4, 0.0, 16000),
            (4, 0.9, 16000),
            (60, 0.5, 16000),
        ],
    )
    def test_values(self, attempt: int, u: float, expected: float) -> None:
        assert backoff_delay_ms(policy(), attempt, FixedRng(u)) == pytest.approx(expected)

    def test_huge_attempt_does_not_overflow(self) -> None:
        assert backoff_delay_ms(policy(), 10**6, FixedRng(0.5)) == 16000


def test_full_jitter_values() -> None:
    p = policy(Jitter.FULL)
    assert backoff_delay_ms(p, 0, FixedRng(0.5)) == 500
    assert backoff_delay_ms(p, 3, FixedRng(0.5)) == 4000
    assert backoff_delay_ms(p, 9, FixedRng(0.5)) == 8000  # capped before the jitter


def test_decorrelated_jitter_grows_from_previous() -> None:
    p = policy(Jitter.DECORRELATED)
    assert backoff_delay_ms(p, 0, FixedRng(0.0)) == 1000
    assert backoff_delay_ms(p, 1, FixedRng(1.0), previous_delay_ms=2000) == 6000
    assert backoff_delay_ms(p, 5, FixedRng(1.0), previous_delay_ms=12000) == 16000


@given(
    jitter=st.sampled_from(list(Jitter)),
    base=st.integers(0, 60_000),
    extra=st.integers(0, 300_000),
    attempt=st.integers(0, 10_000),
    u=st.floats(0.0, 1.0, exclude_max=True),
    previous=st.none() | st.floats(0, 10**7),
)
def test_backoff_stays_within_bounds(
    jitter: Jitter, base: int, extra: int, attempt: int, u: float, previous: float | None
) -> None:
    """For every strategy the delay is within its documented bounds and never above the cap."""
    cap = base + extra
    p = policy(jitter, base_delay_ms=base, max_delay_ms=cap)
    delay = backoff_delay_ms(p, attempt, FixedRng(u), previous)
    exp = base * 2 ** min(attempt, 62)
    assert 0 <= delay <= cap
    if jitter is Jitter.ADDITIVE:
        assert min(exp, cap) <= delay <= min(exp + base, cap)
    elif jitter is Jitter.FULL:
        assert delay <= min(exp, cap)
    else:
        assert min(base, cap) <= delay


class TestDecision:
    def test_budget_is_enforced(self) -> None:
        rng = random.Random(1)
        assert decide_retry(policy(), 2, rng).retry
        assert decide_retry(policy(), 3, rng) == decide_retry(policy(), 3, rng)
        assert decide_retry(policy(), 3, rng).reason is GiveUpReason.BUDGET_EXHAUSTED
        assert decide_retry(policy(max_retries=0), 0, rng).reason is GiveUpReason.NOT_RETRYABLE
        assert decide_retry(policy(), 0, rng, retryable=False).reason is GiveUpReason.NOT_RETRYABLE

    def test_retry_after_is_a_minimum(self) -> None:
        """seed edge case 2: Retry-After is the minimum delay of the next attempt."""
        p = policy(honors_retry_after=True, base_delay_ms=2000, max_delay_ms=8000, max_retries=2)
        d = decide_retry(p, 0, FixedRng(0.0), retry_after_ms=30_000)
        assert (d.retry, d.delay_ms, d.from_retry_after) == (True, 30_000, True)
        shorter = decide_retry(p, 0, FixedRng(0.0), retry_after_ms=500)
        assert (shorter.delay_ms, shorter.from_retry_after) == (2000, False)

    def test_retry_after_past_the_ceiling_gives_up(self) -> None:
        p = policy(honors_retry_after=True, retry_after_ceiling_ms=180_000)
        d = decide_retry(p, 0, FixedRng(0.5), retry_after_ms=181_000)
        assert (d.retry, d.reason) == (False, GiveUpReason.RETRY_AFTER_EXCEEDS_CEILING)

    def test_retry_after_ignored_when_not_honoured_or_invalid(self) -> None:
        assert decide_retry(policy(), 0, FixedRng(0.0), retry_after_ms=60_000).delay_ms == 1000
        p = policy(honors_retry_after=True)
        assert decide_retry(p, 0, FixedRng(0.0), retry_after_ms=-5).delay_ms == 1000

    @given(
        attempt=st.integers(0, 1),
        ra=st.none() | st.integers(-10, 400_000),
        u=st.floats(0, 1, exclude_max=True),
    )
    def test_never_earlier_than_retry_after(self, attempt: int, ra: int | None, u: float) -> None:
        p = policy(honors_retry_after=True, max_retries=2, base_delay_ms=2000, max_delay_ms=8000)
        d = decide_retry(p, attempt, FixedRng(u), retry_after_ms=ra)
        if d.retry and ra is not None and ra >= 0:
            assert d.delay_ms >= ra
        if ra is not None and ra > p.retry_after_ceiling_ms:
            assert not d.retry


class TestRetryAfterParsing:
    """RFC 9110 section 10.2.3: delay-seconds or HTTP-date."""

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("3", 3000),
            (" 120 ", 120_000),
            ("0", 0),
            (5, 5000),
            ("Tue, 14 May 2024 09:32:20 GMT", 9000),
            ("Tuesday, 14-May-24 09:32:21 GMT", 10_000),
            ("Tue May 14 09:32:12 2024", 1000),
            ("Tue, 14 May 2024 09:32:20 UTC", None),
            ("Tue, 14 Foo 2024 09:32:20 GMT", None),
            ("Tue, 32 May 2024 09:32:20 GMT", None),
            ("Tue, 14 May 2024 09:00:00 GMT", 0),
            ("-1", None),
            ("1.5", None),
            ("soon", None),
            ("", None),
            (None, None),
            (True, None),
            (-3, None),
            ("9" * 80, None),
        ],
    )
    def test_values(self, value: object, expected: int | None) -> None:
        assert parse_retry_after_ms(value, NOW) == expected

    @given(text(max_size=80))
    def test_never_raises(self, value: str) -> None:
        result = parse_retry_after_ms(value, NOW)
        assert result is None or result >= 0


class TestMaxAge:
    """RFC 9111 section 5.2.2.1: poll intervals from Cache-Control: max-age."""

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("max-age=5", 5000),
            ("private, max-age=30", 30_000),
            ('max-age="7", must-revalidate', 7000),
            ("no-cache", None),
            ("s-maxage=9", None),
            ("max-age=abc", None),
            ("", None),
            (None, None),
        ],
    )
    def test_values(self, value: object, expected: int | None) -> None:
        assert parse_max_age_ms(value) == expected
