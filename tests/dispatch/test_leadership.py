"""Leases and fair sharing of shards between dispatchers, on a real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from celery_zset_scheduler.dispatch.leadership import Leadership, fair_share
from celery_zset_scheduler.store.pending import Store


def test_fair_share_deals_round_robin() -> None:
    members = ["b", "a", "c"]
    shares = [fair_share(members, m, 8) for m in ("a", "b", "c")]
    assert shares == [{0, 3, 6}, {1, 4, 7}, {2, 5}]
    assert fair_share(members, "stranger", 8) == set()


def test_epoch_increments_on_every_new_holder(store: Store, r: redis.Redis) -> None:
    a = Leadership(store, "a", 0.3, pinned={0})
    b = Leadership(store, "b", 0.3, pinned={0})
    a.beat()
    assert 0 in a.owned and b.beat().acquired == []  # held: b cannot take it
    first = a.owned[0].fence.epoch
    time.sleep(0.4)
    assert b.beat().acquired == [0]
    assert b.owned[0].fence.epoch == first + 1
    assert a.beat().lost == [0]  # a notices the lost lease and stays in the election
    b.release_all()
    assert a.beat().acquired == [0] and a.owned[0].fence.epoch == first + 2


def beat_all(group: list[Leadership], rounds: int = 3) -> None:
    for _ in range(rounds):
        for member in group:
            member.beat()


def owners(group: list[Leadership], shards: int) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {s: [] for s in range(shards)}
    for member in group:
        for shard in member.owned:
            found[shard].append(member.member_id)
    return found


@pytest.mark.parametrize("count", [2, 3])
def test_every_shard_has_exactly_one_leader_and_shares_are_fair(store: Store, count: int) -> None:
    group = [Leadership(store, f"d{i}", 5.0) for i in range(count)]
    beat_all(group)
    found = owners(group, store.shards)
    assert all(len(holders) == 1 for holders in found.values()), found
    sizes = sorted(len(m.owned) for m in group)
    assert sizes[-1] - sizes[0] <= 1


def test_a_joining_dispatcher_gets_its_share_and_a_leaving_one_hands_over(store: Store) -> None:
    a, b = Leadership(store, "a", 5.0), Leadership(store, "b", 5.0)
    beat_all([a])
    assert set(a.owned) == {0, 1, 2, 3}
    beat_all([a, b])
    assert (set(a.owned), set(b.owned)) == ({0, 2}, {1, 3})
    b.release_all()
    beat_all([a])
    assert set(a.owned) == {0, 1, 2, 3}


def test_the_hook_before_a_release_runs_once_while_the_shards_are_still_held(store: Store) -> None:
    a, b = Leadership(store, "a", 5.0), Leadership(store, "b", 5.0)
    calls: list[set[int]] = []
    a.beat(before_release=lambda: calls.append(set(a.owned)))
    assert calls == [] and set(a.owned) == {0, 1, 2, 3}  # nothing to release: not called
    b.beat()
    a.beat(before_release=lambda: calls.append(set(a.owned)))
    assert calls == [{0, 1, 2, 3}] and set(a.owned) == {0, 2}  # called once, before letting 1 and 3 go


def test_a_dead_dispatchers_shards_move_after_the_lock_timeout(store: Store) -> None:
    a, b = Leadership(store, "a", 0.5), Leadership(store, "b", 0.5)
    beat_all([a, b])
    assert set(b.owned) == {1, 3}
    started = time.monotonic()
    while set(a.owned) != {0, 1, 2, 3}:  # b stops beating, as if killed
        a.beat()
        time.sleep(0.05)
        # Correctness bounds of the election: taken over after the lease, not never and not before.
        assert time.monotonic() - started < 2.0
    assert time.monotonic() - started >= 0.3  # not before b's lease could have expired
