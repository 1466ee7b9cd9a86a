"""What a reshard costs: ``python -m bench.reshard [N]`` (own redis-server; N entries, default 100,000).

Fills a store of 8 shards with N entries (300-byte messages, due far ahead), then times the dry
run 8 -> 16 and the reshards 8 -> 16 and 16 -> 4 (no producers or dispatchers running: the cost
of the move itself, batch 500).
"""

from __future__ import annotations

import logging
import sys
import time

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.ops.reshard import plan, reshard
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer


def main(n: int) -> None:
    logging.getLogger("celery_zset_scheduler").setLevel(logging.ERROR)
    server = RedisServer().start()
    try:
        store = Store(make_client(server.url), KeySpace("bench-reshard", 8))
        store.add_many((f"task-{i}", 10**13 + i, b"x" * 300) for i in range(n))
        started = time.perf_counter()
        dry = plan(store, 16)
        print(f"dry run 8 -> 16: {n:,} entries read in {time.perf_counter() - started:.2f} s, "
              f"{sum(m.entries.moving for m in dry.shards):,} would move")
        for to in (16, 4):
            started = time.perf_counter()
            report = reshard(store, to)
            took = time.perf_counter() - started
            moved = report.moved["entries"]
            print(f"reshard {report.shards_from} -> {to}: {moved:,} of {n:,} entries moved in {took:.2f} s "
                  f"({moved / took:,.0f} moved/s, {report.passes} passes)")
    finally:
        server.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
