"""Entries of all shards reach the broker in due order, even when the claims of one round trip
read Redis' clock at different moments (each claim script reads TIME when it runs)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence

from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.config import DispatcherConfig
from celery_zset_scheduler.dispatch.generic import generic
from celery_zset_scheduler.dispatch.handoff import Guard, Outgoing, PublishReport
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.store.schedule import NewEntry

from ..support.helpers import AppFactory, built_message, wait_for


class Recording(KombuPublisher):
    """Kombu's publisher, noting the order in which messages really went out."""

    def __init__(self, app: object) -> None:
        super().__init__(app)
        self.order: list[str] = []

    def publish(self, batch: Sequence[Outgoing], guard: Guard) -> PublishReport:
        report = super().publish(batch, guard)
        self.order += [o.message.task_id for o in batch[: report.published]]
        return report


def test_a_slow_claim_in_the_same_round_trip_does_not_reorder_shards(apps: AppFactory) -> None:
    app = apps(shards=2)
    store = apps.store(app)
    payload = built_message(app.tasks["t.record"], kwargs={"tag": 1})
    from celery_zset_scheduler.model.codec import encode

    raw = encode(payload)
    now = int(time.time() * 1000)
    ids = {0: [], 1: []}  # type: dict[int, list[str]]
    n = 0
    while min(len(v) for v in ids.values()) < 5000:
        task_id = f"t{n}"
        n += 1
        ids[store.keys.shard_of(task_id)].append(task_id)
    # Shard 0 has a big backlog: its claim runs for a while, so shard 1's claim (next in the same
    # pipeline) reads a later clock. Both have entries due every millisecond from now on.
    due: dict[str, int] = {}
    entries = []
    for shard in (0, 1):
        for k, task_id in enumerate(ids[shard]):
            due[task_id] = now - 10_000 if (shard == 0 and k < 4000) else now + 300 + (k % 1000)
            entries.append(NewEntry(task_id, due[task_id], raw))
    store.schedule_many(entries)
    publisher = Recording(app)
    dispatcher = Dispatcher(store, config=DispatcherConfig(batch_size=5000, lock_timeout=10, max_interval=0.5),
                            dead_letters=installation_for(app).dead_letters,  # type: ignore[union-attr]
                            handoff=generic(publisher))
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(publisher.order) == len(entries), timeout=60, what="every entry published")
    finally:
        dispatcher.stop()
        thread.join(timeout=10)
    published = [due[i] for i in publisher.order]
    late = [(a, b) for a, b in itertools.pairwise(published) if b < a]
    assert late == []


def test_tasks_due_at_the_same_instant_go_out_in_send_order_across_shards(apps: AppFactory) -> None:
    from datetime import datetime, timedelta, timezone

    app = apps(shards=4)
    # Far enough ahead that all 200 sends are stored before it, even on a loaded machine.
    eta = datetime.now(timezone.utc) + timedelta(seconds=3)
    sent = [app.tasks["t.record"].apply_async(kwargs={"tag": n}, eta=eta).id for n in range(200)]
    store = apps.store(app)
    assert len({store.keys.shard_of(i) for i in sent}) == 4
    assert len({getattr(store.get(i), "score_ms", None) for i in sent}) == 1  # one instant
    publisher = Recording(app)
    dispatcher = Dispatcher(store, config=DispatcherConfig(lock_timeout=10, max_interval=0.5),
                            dead_letters=installation_for(app).dead_letters,  # type: ignore[union-attr]
                            handoff=generic(publisher))
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(publisher.order) == len(sent), what="every task published")
    finally:
        dispatcher.stop()
        thread.join(timeout=10)
    assert publisher.order == sent


def test_a_shard_left_out_of_a_slow_pass_keeps_its_place(apps: AppFactory) -> None:
    """A shard whose next entry the loop expects a few ms away is left out of a pass; when Redis is
    slow to run that pass (here: another client's script holds the server), the other shards' claims
    read a clock past that entry. What they took due at or after it must wait for it."""
    app = apps(shards=4)
    store = apps.store(app)
    payload = built_message(app.tasks["t.record"], kwargs={"tag": 1})
    from celery_zset_scheduler.model.codec import encode

    raw = encode(payload)
    ids: dict[int, list[str]] = {s: [] for s in range(4)}
    n = 0
    while min(len(v) for v in ids.values()) < 1500:
        task_id = f"t{n}"
        n += 1
        ids[store.keys.shard_of(task_id)].append(task_id)
    start = int(time.time() * 1000) + 800
    due: dict[str, int] = {}
    for k, task_id in enumerate(ids[0][:1500]):  # shard 0: an entry due every millisecond
        due[task_id] = start + k
    for shard in (1, 2, 3):  # the others: one every 40 ms, so that a pass usually leaves them out
        for j, task_id in enumerate(ids[shard][:37]):
            due[task_id] = start + 40 * j + 13 * shard
    store.schedule_many([NewEntry(i, d, raw) for i, d in due.items()])
    busy = "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2] " \
           "repeat local u = redis.call('TIME') until u[1] * 1e6 + u[2] - s > tonumber(ARGV[1])"
    stop = threading.Event()

    def hold_the_server() -> None:  # a loaded Redis: 25 ms busy, 15 ms free, through the window
        client = store.client.connection_pool.get_connection()
        try:
            while not stop.is_set() and time.time() * 1000 < start + 1600:
                client.send_command("EVAL", busy, 0, 25_000)
                client.read_response()
                time.sleep(0.015)
        finally:
            store.client.connection_pool.release(client)

    publisher = Recording(app)
    dispatcher = Dispatcher(store, config=DispatcherConfig(lock_timeout=10, max_interval=0.5),
                            dead_letters=installation_for(app).dead_letters,  # type: ignore[union-attr]
                            handoff=generic(publisher))
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    blocker = threading.Thread(target=hold_the_server, daemon=True)
    thread.start()
    blocker.start()
    try:
        wait_for(lambda: len(publisher.order) == len(due), timeout=60, what="every entry published")
    finally:
        stop.set()
        dispatcher.stop()
        thread.join(timeout=10)
        blocker.join(timeout=10)
    published = [due[i] for i in publisher.order]
    late = [(a, b) for a, b in itertools.pairwise(published) if b < a]
    assert late == []
