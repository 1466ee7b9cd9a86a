"""What durable revokes cost: ``python -m bench.revokes`` (own redis-server, a few seconds).

1. the hand-off's check of a batch (500 ids over 8 shards) when nothing was revoked since its claim
   (the shards' revoke counters, one round trip), next to reading every id's record;
2. from a revoke's return to the id in a following worker's revoked set (the worker's thread);
3. a starting worker's load of ``revoke_max`` (50,000) records.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable

from celery import Celery
from celery.utils.collections import LimitedSet

import celery_zset_scheduler
from celery_zset_scheduler.celery.producer.revokes import revokes_of
from celery_zset_scheduler.celery.worker.revokes import RevokeFollower
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.revokes import revoked_among, revoked_since
from celery_zset_scheduler.testing import RedisServer


def median_us(call: Callable[[], object], repeats: int = 500) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    with RedisServer() as server:
        client = make_client(server.url)
        keys = KeySpace("bench", 8)
        batch = {s: [str(uuid.uuid4()) for _ in range(62)] for s in range(8)}
        counters = median_us(lambda: revoked_since(client, keys, {s: (0, ids) for s, ids in batch.items()}))
        records = median_us(lambda: revoked_among(client, keys, batch))
        print(f"hand-off check of 496 ids over 8 shards: {counters:.0f} us (counters), {records:.0f} us (every record)")

        app = Celery("bench_revokes", broker=server.url_db(1), set_as_current=False)
        app.conf.zset_scheduler_url = server.url
        app.conf.zset_scheduler_shards = 8
        celery_zset_scheduler.install(app)
        revokes = revokes_of(app)
        assert revokes is not None
        revoked = LimitedSet(maxlen=100_000, expires=10800)
        follower = RevokeFollower(app, revoked)
        follower.start()
        lags = []
        for _ in range(300):
            task_id = str(uuid.uuid4())
            revokes.revoke([task_id])
            returned = time.perf_counter()
            while task_id not in revoked:
                time.sleep(0)
            lags.append((time.perf_counter() - returned) * 1e6)
        follower.stop()
        lags.sort()
        print(f"revoke returned -> id in the worker's set: p50 {lags[150]:.0f} us, p99 {lags[296]:.0f} us")

        revokes.revoke([str(uuid.uuid4()) for _ in range(50_000)])
        fresh = RevokeFollower(app, LimitedSet(maxlen=100_000, expires=10800))
        started = time.perf_counter()
        fresh._load(revokes.store)
        print(f"worker start, load of {len(fresh.revoked)} records: {(time.perf_counter() - started) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
