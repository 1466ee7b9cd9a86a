"""The hand-off seam: the loop drives any HandOff the same way (one new class, no loop change)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

import redis

from celery_zset_scheduler.dispatch.config import DispatcherConfig
from celery_zset_scheduler.dispatch.handoff import Env, Pass, ShardPass
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.store.claims import Fence
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.helpers import wait_for


class ListHandOff:
    """Claims, then moves ids into a Redis list and acks: a broker that is a list on the same server."""

    def __init__(self, env: Env, client: redis.Redis, passes: list[list[int]]) -> None:
        self.env, self.client, self.passes = env, client, passes

    def dispatch(self, fences: Sequence[Fence], waiting: Mapping[int, int] | None = None) -> Pass:
        self.passes.append([f.shard for f in fences])
        sent = time.monotonic()
        results = self.env.claims.claim_many(fences, self.env.config.batch_size, 30_000).results
        answered = time.monotonic()
        shards = {}
        for fence in fences:
            result = results[fence.shard]
            assert not isinstance(result, Exception)
            if result.entries:
                self.client.rpush("handed", *[e.task_id for e in result.entries])
                self.env.claims.ack(result.entries)
            shards[fence.shard] = ShardPass(result.fenced, result.now_ms, result.next_due_ms, len(result.entries))
        return Pass(shards, sent, answered)

    holding = False

    def settle(self, *, acks: bool = True, releasing: bool = False) -> None:
        """Nothing held back: every batch is acked at once."""


def test_a_handoff_plugged_into_the_seam_is_driven_by_the_loop(store: Store, r: redis.Redis) -> None:
    now = int(time.time() * 1000)
    store.schedule_many([NewEntry(f"t{i}", now - 1000 + i, b"x") for i in range(50)])
    store.schedule_many([NewEntry("later", now + 600, b"x")])
    passes: list[list[int]] = []
    dispatcher = Dispatcher(store, config=DispatcherConfig(lock_timeout=1.5, max_interval=0.3),
                            handoff=lambda env: ListHandOff(env, r, passes))
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: r.llen("handed") == 51, what="every entry handed off")
    finally:
        dispatcher.stop()
        thread.join(timeout=10)
    handed = [x.decode() for x in r.lrange("handed", 0, -1)]
    assert sorted(handed) == sorted([f"t{i}" for i in range(50)] + ["later"]) and handed[-1] == "later"
    assert sorted(passes[0]) == list(range(store.shards))  # the first pass claims every newly led shard
    assert not any(store.get(i) for i in handed)  # acked
