"""The retry delay function on its own: exponential, capped, with full jitter."""

from __future__ import annotations

import random

import pytest

from celery_zset_scheduler.model.backoff import backoff_bounds, compute_backoff


def test_without_jitter_it_doubles_up_to_the_cap() -> None:
    delays = [compute_backoff(n, base=1.0, cap=10.0, jitter=False) for n in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_full_jitter_stays_within_the_bounds_and_uses_them() -> None:
    rng = random.Random(7)
    for retries in range(12):
        low, high = backoff_bounds(retries, 0.5, 30.0)
        samples = [compute_backoff(retries, base=0.5, cap=30.0, rand=rng.uniform) for _ in range(400)]
        assert all(low <= s <= high for s in samples)
        # Full jitter: spread over the whole interval, not bunched at its top.
        assert min(samples) < high * 0.1 and max(samples) > high * 0.9


def test_huge_retry_counts_do_not_overflow() -> None:
    assert compute_backoff(10_000, base=1.0, cap=600.0, jitter=False) == 600.0


def test_negative_input_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        compute_backoff(-1)


def test_outage_backoff_grows_from_its_floor_to_its_cap_and_resets() -> None:
    from celery_zset_scheduler.model.backoff import OutageBackoff

    highest = OutageBackoff(base=0.1, cap=2.0, rand=lambda low, high: high)
    assert [round(highest.next(), 3) for _ in range(6)] == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    lowest = OutageBackoff(base=0.1, cap=2.0, rand=lambda low, high: low)
    assert {lowest.next() for _ in range(10)} == {0.1}  # never at once: the dispatcher must not spin
    highest.reset()
    assert highest.next() == 0.2
