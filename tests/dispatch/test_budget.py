"""The publish calls of a pass (pure): in order, at most a batch and the byte budget each, big ones
alone last."""

from __future__ import annotations

from celery_zset_scheduler.dispatch.budget import in_budget


def test_items_that_fit_are_one_call() -> None:
    assert in_budget([3, 4, 2], 10, int, 3) == [[3, 4, 2]]
    assert in_budget([], 10, int, 3) == []


def test_calls_stay_within_the_budget_in_order_and_bigger_items_go_alone_after_them() -> None:
    assert in_budget([4, 30, 5, 2, 25, 6], 10, int, 100) == [[4, 5], [2, 6], [30], [25]]
    assert in_budget([10, 10, 1], 10, int, 100) == [[10], [10], [1]]


def test_calls_hold_at_most_a_batch_of_items() -> None:
    assert in_budget([1] * 7, 100, int, 3) == [[1, 1, 1], [1, 1, 1], [1]]
    assert in_budget([1, 1, 50, 1, 1], 10, int, 2) == [[1, 1], [1, 1], [50]]
