# mypy: disallow-untyped-calls=False
"""The pipelined hand-off against a real RabbitMQ: the next batch is claimed while the broker
confirms the one before, an entry leaves the store only once RabbitMQ confirmed it, and every task
arrives exactly once."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from celery import Celery

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.messages import MessageCheck
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.publishers.amqp_confirms import Batch, ConfirmPublisher
from celery_zset_scheduler.dispatch.config import DispatcherConfig
from celery_zset_scheduler.dispatch.handoff import Guard, Outgoing
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.dispatch.observer import Observer
from celery_zset_scheduler.dispatch.pipelined import pipelined

from ..support.amqp import amqp_app, classic, drain_ids, quorum, vhost
from ..support.helpers import AppFactory, wait_for
from ..support.tools import counts

__all__ = ["vhost"]

pytestmark = pytest.mark.timeout(300)


class Recording(ConfirmPublisher):
    """The confirms publisher, noting when each batch is written and finished, and checking at
    each finish (before the hand-off acks anything of it) that its entries are still stored."""

    def __init__(self, app: Celery, events: list[str]) -> None:
        super().__init__(app)
        self.events = events
        self.store = installation_for(app).store  # type: ignore[union-attr]
        self.batches: list[list[str]] = []
        self.still_stored: list[bool] = []

    def begin(self, batch: Sequence[Outgoing], guard: Guard) -> Batch:
        self.batches.append([o.message.task_id for o in batch])
        self.events.append("begin")
        return super().begin(batch, guard)

    def _finish(self, written: Batch) -> Any:
        ids = self.batches[-1]
        self.still_stored.append(all(self.store.get(i) is not None for i in (ids[0], ids[-1])))
        self.events.append("finish")
        return super()._finish(written)


class Claims(Observer):
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def claimed(self, shard: int, count: int, seconds: float) -> None:
        if count:
            self.events.append("claim")


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_the_next_batch_is_claimed_while_the_broker_confirms(vhost: str, apps: AppFactory, queue_type: str) -> None:
    queue = (quorum if queue_type == "quorum" else classic)("zt.q")
    app = amqp_app(apps, vhost, [queue], shards=2)
    record = app.tasks["t.record"]
    ids = [str(r) for r in celery_zset_scheduler.schedule_many(record, [((), {"tag": i}, 0.0) for i in range(3000)])]
    events: list[str] = []
    publisher = Recording(app, events)
    inst = installation_for(app)
    assert inst is not None
    dispatcher = Dispatcher(
        inst.store, config=DispatcherConfig(batch_size=200, lock_timeout=5.0, max_interval=0.5),
        dead_letters=inst.dead_letters, observer=Claims(events),
        handoff=pipelined(publisher, check=MessageCheck(inst.settings.accept_content)),
    )
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: all(c.pending == 0 and c.inflight == 0 for c in counts(inst.store)), timeout=120,
                 what="the store to drain")
    finally:
        dispatcher.stop()
        thread.join(timeout=30)
    arrived = Counter(drain_ids(vhost, "zt.q"))
    assert set(arrived) == set(ids) and max(arrived.values()) == 1
    assert all(publisher.still_stored)  # nothing acked before RabbitMQ confirmed it
    # Passes of 400 (two shards of 200) written as two calls of a batch: the first confirmed (and
    # acked) before the second is written, the second finished only after the next claim.
    writes = [n for n, e in enumerate(events) if e == "begin"]
    overlapped = sum(1 for n in writes if events[n + 1:n + 2] == ["claim"])
    assert len(writes) >= 14 and overlapped >= len(writes) // 2 - 2, events
    written = [e for e in events if e != "claim"]
    assert all(b == "finish" for a, b in itertools.pairwise(written) if a == "begin"), events
