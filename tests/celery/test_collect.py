"""A dispatcher collects the shared prefixes no stored task refers to, and keeps those in use
(a real app and a dispatcher thread on a real Redis; a restarted producer stands for the old
prefixes: entries written under another ``origin``, then cancelled)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.model.codec import encode, shared_length
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.shared import ident
from celery_zset_scheduler.store.shared_gc import usage

from ..store.test_shared import message
from ..support.helpers import AppFactory, wait_for


def test_a_dispatcher_deletes_the_prefixes_of_a_gone_producer_and_keeps_the_rest(apps: AppFactory) -> None:
    app = apps(shards=2, zset_scheduler_collect_interval=0.2)

    @app.task(name="t.add")
    def add(x: int, y: int) -> int:
        return x + y

    later = datetime.now(timezone.utc) + timedelta(hours=1)
    kept = [add.apply_async((n, n), eta=later).id for n in range(20)]
    store = installation_for(app).store
    gone = Store(store.client, store.keys)  # a producer process since restarted
    old = [f"old-{n}" for n in range(20)]
    for n, task_id in enumerate(old):
        gone.schedule(task_id, 10**13, encode(message(task_id, n, origin="gen1@web-gone")))
    assert sum(u.live for u in usage(store.client, store.keys, range(2))) == 4  # 2 prefixes, each in 2 shards
    assert set(store.cancel(old).values()) == {"cancelled"}

    dispatcher = apps.dispatcher(app)
    wait_for(lambda: dispatcher.collector.deleted >= 2, timeout=20, what="the gone producer's prefixes deleted")
    raw = encode(message("x", 0, origin="gen1@web-gone"))
    sid = ident(raw[:shared_length(raw)])
    for shard in range(2):
        sk = store.keys.shard(shard)
        assert not any(store.client.hexists(key, sid) for key in (sk.shared, sk.shared_old, sk.shared_grave))
        assert store.client.hlen(sk.shared) == 1  # ours, in use
    fresh = Store(store.client, store.keys)  # nothing cached: reads the prefixes the store kept
    for task_id in kept:
        entry = fresh.get(task_id)
        assert entry is not None and entry.payload is not None and b'"t.add"' in entry.payload
    assert dispatcher.error is None  # type: ignore[attr-defined]
