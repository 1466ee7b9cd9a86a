"""A few big messages due with many small ones: every task is published and runs exactly once,
the small ones go out within a second of their due time and never behind a big one, and no lease
lapses (the generic built lane, the same-Redis fast path, RabbitMQ with confirms)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_zset_scheduler import schedule_many
from celery_zset_scheduler.dispatch.observer import Observer

from ..support.amqp import amqp_app, classic, drain_ids, vhost
from ..support.helpers import BROKER_DB, STORE_DB, AppFactory, wait_for

__all__ = ["vhost"]

BIG, SMALL = 5, 1000
PAD = "x" * (20 << 20)
#: The default leases (the suite's are short, for its crash tests): what a user runs.
LEASES = {"zset_scheduler_lock_timeout": 10.0, "zset_scheduler_inflight_timeout": 30.0}


class Publishes(Observer):
    """Every publish call the dispatcher reports: how many entries, their lateness (ms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[int, list[int]]] = []

    def published(self, per_shard: Mapping[int, int], lateness_ms: Sequence[int], seconds: float) -> None:
        with self.lock:
            self.calls.append((sum(per_shard.values()), list(lateness_ms)))

    @property
    def count(self) -> int:
        with self.lock:
            return sum(n for n, _ in self.calls)


def schedule_the_mix(app: Celery, queue: str | None = None) -> tuple[set[str], set[str]]:
    """Five 20 MB tasks spread among 1,000 small ones, all due 3 s from now: (big ids, small ids)."""
    task = app.tasks["t.record"]
    eta = datetime.now(timezone.utc) + timedelta(seconds=3)
    options = {"queue": queue} if queue else {}
    small = set(schedule_many(task, [((f"s{i}",), {}, eta) for i in range(SMALL)], **options))
    big = {task.apply_async((f"b{i}",), {"pad": PAD}, eta=eta, **options).id for i in range(BIG)}
    return big, small


def assert_small_ones_first_and_on_time(publishes: Publishes, alone: bool = True) -> None:
    """Every small one published before any big one, within a second of its due time; with
    ``alone``, each big one in a publish call of its own (RabbitMQ's pipelined batch writes
    them after the small ones, a frame at a time, in one batch)."""
    calls = publishes.calls
    total, small_calls = 0, []
    for count, late in calls:
        if total >= SMALL:
            break
        small_calls.append((count, late))
        total += count
    assert total == SMALL, calls
    assert sum(count for count, _ in calls) == SMALL + BIG
    if alone:
        assert [count for count, _ in calls[len(small_calls):]] == [1] * BIG, calls
    lateness = sorted(ms for _, late in small_calls for ms in late)
    assert lateness[-1] < 1000, lateness[-20:]


@pytest.mark.parametrize("where", ["built lane", "fast path"])
def test_five_big_tasks_among_a_thousand_small_ones_on_a_redis_broker(
        apps: AppFactory, where: str, caplog: pytest.LogCaptureFixture) -> None:
    app = apps(broker_url=apps.server.url_db(BROKER_DB if where == "built lane" else STORE_DB), **LEASES)
    apps.worker(app, pool="threads", concurrency=4)
    publishes = Publishes()
    with caplog.at_level(logging.WARNING, logger="celery_zset_scheduler"):
        dispatcher = apps.dispatcher(app, observer=publishes)
        big, small = schedule_the_mix(app)
        wait_for(lambda: publishes.count >= BIG + SMALL, timeout=60, what="every task published")
        wait_for(lambda: len(apps.executions()) >= BIG + SMALL, timeout=60, what="every task run")
    handoff: Any = dispatcher.handoff
    if where == "built lane":  # the small ones' envelopes built by the claim script
        assert handoff.routes() is None and handoff.prebuilt >= SMALL
    else:  # the small ones pushed by the fast path's script, the big ones published the generic way
        assert handoff.pushed == SMALL and handoff.left == BIG
    runs = Counter(run["id"] for run in apps.executions())
    assert set(runs) == big | small and set(runs.values()) == {1}  # each exactly once
    assert_small_ones_first_and_on_time(publishes)
    assert not [r for r in caplog.records if "abandoned" in r.getMessage() or "outage" in r.getMessage()]


def test_five_big_tasks_among_a_thousand_small_ones_on_rabbitmq(
        vhost: str, apps: AppFactory, caplog: pytest.LogCaptureFixture) -> None:
    queue = classic("zt.big")
    app = amqp_app(apps, vhost, [queue], **LEASES)
    publishes = Publishes()
    with caplog.at_level(logging.WARNING, logger="celery_zset_scheduler"):
        apps.dispatcher(app, observer=publishes)
        started = time.monotonic()
        big, small = schedule_the_mix(app, queue.name)
        wait_for(lambda: publishes.count >= BIG + SMALL, timeout=60, what="every task published")
    arrived = Counter(drain_ids(vhost, queue.name))
    assert set(arrived) == big | small and set(arrived.values()) == {1}
    assert_small_ones_first_and_on_time(publishes, alone=False)
    assert time.monotonic() - started < 60
    assert not [r for r in caplog.records if "abandoned" in r.getMessage() or "outage" in r.getMessage()]


def test_the_claim_takes_at_most_the_byte_budget_and_a_bigger_entry_alone(apps: AppFactory) -> None:
    """The claim script itself: entries in due order up to the budget, the one bigger than it
    passed over while smaller ones are due and then claimed alone (store-level, no dispatcher)."""
    from celery_zset_scheduler.dispatch.leadership import Leadership
    from celery_zset_scheduler.store.claims import Claims

    app = apps(shards=1)
    store = apps.store(app)
    task = app.tasks["t.record"]
    eta = datetime.now(timezone.utc) + timedelta(milliseconds=300)
    ids = [task.apply_async((f"m{i}",), {"pad": "p" * 30_000 if i == 2 else "q" * 3_000}, eta=eta).id
           for i in range(6)]
    time.sleep(0.5)  # due, late by less than a second
    leadership = Leadership(store, "test", 10.0, pinned={0})
    leadership.beat()
    fence = leadership.owned[0].fence
    claims = Claims(store, budget=20_000)
    first = claims.claim_many([fence], 100, 30_000).results[0]
    second = claims.claim_many([fence], 100, 30_000).results[0]
    third = claims.claim_many([fence], 100, 30_000).results[0]
    got = [[e.task_id for e in c.entries] for c in (first, second, third)]
    small = [i for n, i in enumerate(ids) if n != 2]
    assert sorted(got[0] + got[1]) == sorted(small) and ids[2] not in got[0] + got[1]
    assert sum(len(e.payload) for e in first.entries) <= 20_000 and len(got[0]) == 4  # the budget, in due order
    assert got[2] == [ids[2]]  # alone, once no smaller one is due
