"""The hand-off's revoke check (I10) against a real store: it compares each shard's revoke count at
the claim with a count read later, either at the hand-off itself or, for the built lane with a
claim sent ahead, just before that claim went (Redis answers nothing else while it runs)."""

from __future__ import annotations

import redis

from celery_zset_scheduler.dispatch.guard import LeaseGuard
from celery_zset_scheduler.dispatch.handoff import Built, Env
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.revokes import Revokes, revoke_counts

from ..store.test_claims import ids_in_shard


def env_of(store: Store) -> Env:
    made: list[Env] = []
    Dispatcher(store, handoff=lambda env: made.append(env))  # type: ignore[arg-type,func-returns-value]
    return made[0]


def test_the_guard_compares_the_claims_counts_with_a_read_made_after_them(store: Store, r: redis.Redis) -> None:
    a, b = ids_in_shard(store, 1, 2)
    (c,) = ids_in_shard(store, 2, 1)
    batch = [Built(a, 1, b"{}", "celery"), Built(b, 1, b"{}", "celery"), Built(c, 2, b"{}", "celery")]
    env = env_of(store)
    at_claim = revoke_counts(store.client, store.keys, [1, 2])
    assert LeaseGuard(env, {}, at_claim, at_claim).revoked(batch) == frozenset()

    Revokes(store, 60, 100).revoke([a])  # in flight (or already gone): a record in shard 1
    read_since = revoke_counts(store.client, store.keys, [1, 2])
    assert read_since == {1: at_claim[1] + 1, 2: at_claim[2]}
    assert LeaseGuard(env, {}, at_claim).revoked(batch) == {0}  # read at the hand-off
    assert LeaseGuard(env, {}, at_claim, read_since).revoked(batch) == {0}  # read before a claim sent ahead
    # A shard the read left out is read at the hand-off.
    assert LeaseGuard(env, {}, at_claim, {2: read_since[2]}).revoked(batch) == {0}
    # A revoke after the read is not seen here: an installed worker drops that task (its record).
    assert LeaseGuard(env, {}, at_claim, at_claim).revoked(batch) == frozenset()
    # A shard with no count at the claim is always looked up.
    assert LeaseGuard(env, {}, {2: at_claim[2]}, read_since).revoked(batch) == {0}


def test_a_read_made_before_serves_one_check_and_none_that_must_read_now(store: Store, r: redis.Redis) -> None:
    (a,) = ids_in_shard(store, 1, 1)
    batch = [Built(a, 1, b"{}", "celery")]
    env = env_of(store)
    at_claim = revoke_counts(store.client, store.keys, [1])
    Revokes(store, 60, 100).revoke([a])
    guard = LeaseGuard(env, {}, at_claim, at_claim)  # read before the revoke
    # Inside a WATCHed transaction the check reads now: the WATCH covers only later changes.
    assert guard.revoked(batch, now=True) == {0}
    guard = LeaseGuard(env, {}, at_claim, at_claim)
    assert guard.revoked(batch) == frozenset()  # the first check takes the read
    assert guard.revoked(batch) == {0}  # a later one (the next 100 messages, a retry) reads now


def test_no_shard_no_round_trip(store: Store, r: redis.Redis) -> None:
    assert revoke_counts(store.client, store.keys, []) == {}
    assert revoke_counts(store.client, store.keys, [0, 3]) == {0: 0, 3: 0}
