"""The generic path with a Redis broker on another database: the claim script builds Kombu's
envelope of what the fast path's builder can rebuild exactly, Python only forwards it. What lands
is what Kombu's Redis transport writes, field by field (priority sub-queues, global_keyprefix);
what it leaves (exchanges, expires, a fanout) takes the Python path in the same pass (real apps,
dispatcher threads, the store on one database and the broker on another)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.built import BuiltHandOff
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.model.ids import member, task_id_of
from celery_zset_scheduler.store.built import claim_built_many
from celery_zset_scheduler.store.values import STAMP_BYTES, UNSTAMPED, split

from ..support.helpers import BROKER_DB, AppFactory, built_message, publish_by_hand, wait_for
from .test_fast_path import (
    GENERIC_CASES,
    QUEUES,
    assert_same_envelope,
    by_id,
    dispatch_discarded_and_one_good,
    drain,
    field_cases,
    lists,
    send_all,
    set_aside,
)


def elsewhere(apps: AppFactory, **conf: Any) -> tuple[Celery, Celery]:
    """A plain Celery app and an installed one, the broker on another database than the store."""
    conf = {"broker_url": apps.server.url_db(BROKER_DB), "task_queues": QUEUES, **conf}
    return apps(install=False, **conf), apps(**conf)


def handoff_of(apps: AppFactory, app: Celery) -> BuiltHandOff:
    dispatcher: Dispatcher = apps.dispatcher(app)
    handoff = dispatcher.handoff
    assert isinstance(handoff, BuiltHandOff)
    return handoff


def dispatched(apps: AppFactory, app: Celery, broker: redis.Redis, ids: list[str]
               ) -> tuple[BuiltHandOff, dict[str, tuple[bytes, dict[str, Any]]]]:
    handoff = handoff_of(apps, app)
    mine: dict[str, tuple[bytes, dict[str, Any]]] = {}
    wait_for(lambda: mine.update(by_id(drain(broker))) or len(mine) >= len(ids), what="the published messages")
    return handoff, mine


def test_the_claim_builds_what_kombu_writes_field_by_field(apps: AppFactory) -> None:
    plain, ours = elsewhere(apps)
    broker = apps.server.client(BROKER_DB)
    calls = field_cases()
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert handoff.prebuilt == len(ids)
    assert set(mine) == set(theirs) == set(generic) == set(ids)
    for task_id in ids:
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0]  # the same list
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)
    time.sleep(0.3)  # acked with the next claim
    assert all(celery_zset_scheduler.lookup(ours, i) is None for i in ids)


@pytest.mark.parametrize("options", [
    {},  # Kombu's default steps [0, 3, 6, 9]
    {"queue_order_strategy": "priority", "priority_steps": list(range(10))},
    {"queue_order_strategy": "priority", "priority_steps": [0, 5], "sep": ":"},
    {"global_keyprefix": "pfx:", "queue_order_strategy": "priority"},
    # Below the first step Kombu's bisect picks the last step's list: so must the builder.
    {"queue_order_strategy": "priority", "priority_steps": [3, 6, 9]},
], ids=["default-steps", "ten-steps", "two-steps-own-sep", "global-keyprefix", "steps-without-0"])
def test_priorities_land_in_kombus_priority_sub_queues(apps: AppFactory, options: dict[str, Any]) -> None:
    plain, ours = elsewhere(apps, broker_transport_options=options)
    broker = apps.server.client(BROKER_DB)
    calls = [{"args": (p,), "task_id": str(uuid.uuid4()), "queue": "q", "priority": p}
             for p in (None, 0, 1, 3, 4, 5, 8, 9, 12)]
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert handoff.prebuilt == len(ids)
    assert len({key for key, _ in theirs.values()}) > 1  # several sub-queues in play
    for task_id in ids:
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0], mine[task_id][1]["properties"]
        assert mine[task_id][0].startswith(b"pfx:") == ("global_keyprefix" in options)
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)


def test_exchanges_and_what_the_builder_cannot_rebuild_take_the_python_path(apps: AppFactory) -> None:
    # Bindings live on the broker, out of the claim script's reach: routed messages are Python's.
    direct, topic = Exchange("dx", type="direct"), Exchange("tx", type="topic")
    queues = [*QUEUES, Queue("d1", direct, routing_key="dk"), Queue("t1", topic, routing_key="a.*")]
    plain, ours = elsewhere(apps, task_queues=queues)
    broker = apps.server.client(BROKER_DB)
    with plain.producer_or_acquire() as producer:
        for queue in queues:
            producer.maybe_declare(queue)
    calls = [{"args": (name,), "task_id": f"{name}-{uuid.uuid4()}", **options}
             for name, options in GENERIC_CASES.items()]
    calls += [{"args": ("direct",), "task_id": f"direct-{uuid.uuid4()}", "exchange": "dx", "routing_key": "dk"},
              {"args": ("topic",), "task_id": f"topic-{uuid.uuid4()}", "exchange": "tx", "routing_key": "a.b"},
              {"args": ("built",), "task_id": f"built-{uuid.uuid4()}"}]
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert handoff.prebuilt == 1
    for envelopes in (generic, mine):
        ttl = int(envelopes[calls[0]["task_id"]][1]["properties"].pop("expiration"))
        assert 0 < ttl <= 60_000  # what is left until expires when it was published
    for task_id in ids:
        assert mine[task_id][0] == generic[task_id][0] == theirs[task_id][0]
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)
    assert mine[calls[-3]["task_id"]][0] == b"d1" and mine[calls[-2]["task_id"]][0] == b"t1"


def test_a_fanout_in_the_same_pass_goes_after_the_built_envelopes(apps: AppFactory) -> None:
    from kombu.common import Broadcast

    _, ours = elsewhere(apps, task_queues=[*QUEUES, Broadcast("bc")])
    broker = apps.server.client(BROKER_DB)
    listener = broker.pubsub()
    listener.psubscribe("*bc*")  # Kombu's Redis fanout is pub/sub
    wait_for(lambda: listener.get_message(timeout=0.1), what="the subscription")
    fanned, queued = str(uuid.uuid4()), str(uuid.uuid4())
    ours.tasks["t.record"].apply_async(("f",), task_id=fanned, queue="bc", countdown=0.3)
    ours.tasks["t.record"].apply_async(("q",), task_id=queued, countdown=0.3)
    handoff = handoff_of(apps, ours)

    def published() -> Any:
        message = listener.get_message(timeout=0.2)
        return message if message and message["type"] == "pmessage" else None

    assert json.loads(wait_for(published, what="the fanout message")["data"])["headers"]["id"] == fanned
    wait_for(lambda: broker.llen("celery"), what="the built envelope")
    assert json.loads(broker.rpop("celery"))["headers"]["id"] == queued
    assert handoff.prebuilt == 1
    listener.close()


def test_a_message_a_worker_would_discard_is_dead_lettered_not_built(apps: AppFactory) -> None:
    _, ours = elsewhere(apps)
    broker = apps.server.client(BROKER_DB)
    handoff = dispatch_discarded_and_one_good(apps, ours, broker, dispatched)
    assert handoff.prebuilt == 1
    assert lists(broker) == {}


def test_a_built_envelope_runs_on_a_real_worker(apps: AppFactory) -> None:
    _, ours = elsewhere(apps)
    eta = datetime.now(timezone.utc) + timedelta(seconds=0.3)
    result = ours.tasks["t.record"].apply_async(kwargs={"tag": "ran"}, eta=eta, queue="q")
    handoff = handoff_of(apps, ours)
    apps.worker(ours)
    assert result.get(timeout=30) == "ran"
    assert handoff.prebuilt == 1


def test_a_broker_outage_releases_the_built_batch_and_resumes(apps: AppFactory,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    from celery_zset_scheduler.testing import RedisServer

    broker_server = RedisServer(appendonly=True).start()  # AOF with fsync always: kill -9 keeps the lists
    try:
        ours = apps(broker_url=broker_server.url, task_queues=QUEUES)
        ids = [ours.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.3 + 3.0 * i / 100).id
               for i in range(100)]
        caplog.set_level("INFO")
        handoff = handoff_of(apps, ours)
        broker = broker_server.client()
        wait_for(lambda: broker.llen("celery") >= 5, what="publishing to start")
        broker_server.stop(kill=True)
        time.sleep(1.5)
        broker_server.start()
        broker = broker_server.client()
        wait_for(lambda: {json.loads(m)["headers"]["id"] for m in broker.lrange("celery", 0, -1)} == set(ids),
                 timeout=30, what="every task in the queue after the outage")
        assert "outage.started" in caplog.text and "outage.ended" in caplog.text
        assert handoff.prebuilt > len(ids)  # what was claimed during the outage went back and came again
        time.sleep(0.5)
        assert all(celery_zset_scheduler.lookup(ours, i) is None for i in ids)  # acked once published
    finally:
        broker_server.close()


def test_a_dispatcher_started_while_the_broker_is_down_waits_for_it(apps: AppFactory) -> None:
    from celery_zset_scheduler.testing import RedisServer

    broker_server = RedisServer().start()
    try:
        sender, ours = (apps(broker_url=broker_server.url, task_queues=QUEUES) for _ in range(2))
        ids = [sender.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=1.0).id for i in range(5)]
        broker_server.stop(kill=True)
        # Its first claims decide the route tables, with no connection to the broker yet: it is down.
        dispatcher = apps.dispatcher(ours)
        time.sleep(10.0)  # longer than Kombu's own connection retries
        assert dispatcher.error is None and dispatcher.thread.is_alive()  # type: ignore[attr-defined]
        broker_server.start()
        broker = broker_server.client()
        wait_for(lambda: {json.loads(m)["headers"]["id"] for m in broker.lrange("celery", 0, -1)} == set(ids),
                 timeout=30, what="every task in the queue once the broker is back")
    finally:
        broker_server.close()


def test_with_the_broker_down_each_attempt_gives_up_at_once(apps: AppFactory) -> None:
    """Deciding the route tables and publishing make two quick attempts to connect: a pass never waits
    out Kombu's own connection retries (~6 s each), longer than a shard's lease."""
    from celery_zset_scheduler.celery.publishers.built_routes import BuiltRoutes
    from celery_zset_scheduler.celery.publishers.fast_routes import FastRoutes
    from celery_zset_scheduler.celery.publishers.reach import CONNECT_WITHIN_S
    from celery_zset_scheduler.testing import RedisServer

    broker_server = RedisServer().start()
    try:
        ours = apps(broker_url=broker_server.url, task_queues=QUEUES)
        message = built_message(ours.tasks["t.record"], kwargs={"tag": 1}, countdown=60)
        broker_server.stop(kill=True)
        store = installation_for(ours).store.client
        attempts: list[tuple[str, Any, float]] = []
        for name, attempt in [
            ("fast routes", FastRoutes(ours, store, {"application/json"})),
            ("built routes", BuiltRoutes(ours, {"application/json"})),
            ("publish", lambda: publish_by_hand(KombuPublisher(ours), [message])),
        ]:
            started = time.monotonic()
            result = attempt()
            attempts.append((name, result, time.monotonic() - started))
        (_, fast, _), (_, built, _), (_, report, _) = attempts
        assert fast is None and built is None  # undecided: tried again later
        assert report.published == 0 and report.error is not None  # the dispatcher releases the batch
        slow = [(name, round(took, 2)) for name, _, took in attempts if took > CONNECT_WITHIN_S + 1.0]
        assert not slow, slow
    finally:
        broker_server.close()


def burst(app: Celery, count: int, per_ms: int = 3) -> list[str]:
    """``count`` tasks due ``per_ms`` a millisecond, in the order of the list; returns once they are
    all due, the ids in that order. Each is due a moment after it is sent (one sent after its due
    time would go straight to the broker): on a slow machine the burst thins out, its order holds."""
    start = datetime.now(timezone.utc) + timedelta(seconds=1.0 + count / 1000)
    record = app.tasks["t.record"]
    ids: list[str] = []
    eta = start
    for i in range(count):
        eta = max(start + timedelta(milliseconds=i // per_ms), datetime.now(timezone.utc) + timedelta(seconds=0.5))
        ids.append(record.apply_async(kwargs={"tag": i}, eta=eta).id)
    time.sleep(max(0.0, (eta - datetime.now(timezone.utc)).total_seconds()) + 0.05)
    return ids


def in_flight(app: Celery) -> int:
    store = installation_for(app).store  # type: ignore[union-attr]
    return sum(int(store.client.zcard(store.keys.shard(s).inflight)) for s in range(store.keys.shards))


def test_a_burst_is_claimed_ahead_of_each_publish_and_goes_out_in_due_order_once(apps: AppFactory) -> None:
    """Each claim after a full batch goes while that batch is published: the queue still gets every
    task once, in due order (ties in the order they were sent), and every entry is acked."""
    _, ours = elsewhere(apps, zset_scheduler_batch_size=40)
    ids = burst(ours, 1200)  # all due before the dispatcher starts: a burst of full batches
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    handoff = handoff_of(apps, ours)
    wait_for(lambda: broker.llen("celery") >= len(ids), timeout=60, what="the whole burst in the queue")
    order = [m["headers"]["id"] for m in drain(broker)[b"celery"]]
    assert order == ids
    assert handoff.claimed_ahead > 5 and handoff.prebuilt == 1200
    wait_for(lambda: in_flight(ours) == 0, what="every entry acked")
    assert all(celery_zset_scheduler.lookup(ours, i) is None for i in ids[::50])


def test_a_broker_outage_under_claims_sent_ahead_loses_nothing(apps: AppFactory) -> None:
    """The broker killed in the middle of a burst: the batch that failed and the claim sent ahead of
    it go back to due, and all of it comes out once the broker is back, acked."""
    from celery_zset_scheduler.testing import RedisServer

    broker_server = RedisServer(appendonly=True).start()  # AOF with fsync always: kill -9 keeps the lists
    try:
        ours = apps(broker_url=broker_server.url, task_queues=QUEUES, zset_scheduler_batch_size=40)
        ids = burst(ours, 3000, per_ms=6)
        handoff = handoff_of(apps, ours)
        broker = broker_server.client()
        wait_for(lambda: broker.llen("celery") >= 200, what="publishing to start")
        broker_server.stop(kill=True)
        ahead = handoff.claimed_ahead
        time.sleep(1.5)
        broker_server.start()
        broker = broker_server.client()
        wait_for(lambda: {json.loads(m)["headers"]["id"] for m in broker.lrange("celery", 0, -1)} == set(ids),
                 timeout=60, what="every task in the queue after the outage")
        assert ahead > 0 and handoff.claimed_ahead > ahead  # sent ahead before the outage and after it
        wait_for(lambda: in_flight(ours) == 0, what="every entry acked")
    finally:
        broker_server.close()


def test_a_dispatcher_stopped_in_a_burst_puts_its_claim_sent_ahead_back(apps: AppFactory) -> None:
    _, ours = elsewhere(apps, zset_scheduler_batch_size=40)
    ids = burst(ours, 20000, per_ms=20)
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    dispatcher: Dispatcher = apps.dispatcher(ours)
    wait_for(lambda: broker.llen("celery") >= 2000, what="the burst to start")
    dispatcher.stop()
    dispatcher.thread.join(timeout=30)  # type: ignore[attr-defined]
    handoff = dispatcher.handoff
    assert isinstance(handoff, BuiltHandOff) and handoff.claimed_ahead > 0
    assert not dispatcher.thread.is_alive()  # type: ignore[attr-defined]
    published = int(broker.llen("celery"))
    assert 0 < published < len(ids) and in_flight(ours) == 0  # nothing left claimed
    store = installation_for(ours).store  # type: ignore[union-attr]
    waiting = sum(int(store.client.zcard(store.keys.shard(s).due)) for s in range(store.keys.shards))
    assert waiting == len(ids) - published  # the rest waits in due


def backlog(app: Celery, count: int) -> list[str]:
    """``count`` tasks already due, ten a millisecond, in the order of the list (one bulk call:
    a backlog large enough to outlast a hand-over of shards between dispatchers)."""
    start = datetime.now(timezone.utc) - timedelta(seconds=1 + count / 10_000)
    calls = [((), {"tag": i}, start + timedelta(microseconds=100 * i)) for i in range(count)]
    return [str(i) for i in celery_zset_scheduler.schedule_many(app.tasks["t.record"], calls)]


def test_a_dispatcher_joining_in_a_burst_takes_shards_with_nothing_claimed_ahead_left_behind(
        apps: AppFactory) -> None:
    """The leader hands half its shards to a dispatcher that joins mid-burst; the claim it sent
    ahead goes back before it lets them go: each task once, each shard's in due order, and the
    second dispatcher publishes part of the burst (the hand-over happened in it)."""
    _, ours = elsewhere(apps, zset_scheduler_batch_size=40)
    ids = backlog(ours, 60_000)
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    first: Dispatcher = apps.dispatcher(ours)
    wait_for(lambda: broker.llen("celery") >= 1000, what="the burst to start")
    second: Dispatcher = apps.dispatcher(apps(broker_url=apps.server.url_db(BROKER_DB), task_queues=QUEUES,
                                              zset_scheduler_batch_size=40))
    wait_for(lambda: broker.llen("celery") >= len(ids), timeout=120, what="the whole burst in the queue")
    order = [m["headers"]["id"] for m in drain(broker)[b"celery"]]
    assert sorted(order) == sorted(ids)  # each once
    keys = installation_for(ours).store.keys  # type: ignore[union-attr]
    rank = {task_id: n for n, task_id in enumerate(ids)}
    for shard in range(keys.shards):
        mine = [rank[i] for i in order if keys.shard_of(i) == shard]
        assert mine == sorted(mine), f"shard {shard} out of due order"
    assert isinstance(first.handoff, BuiltHandOff) and first.handoff.claimed_ahead > 0
    assert isinstance(second.handoff, BuiltHandOff) and 0 < second.handoff.prebuilt < len(ids)
    assert first.leadership.owned and second.leadership.owned  # the shards were shared
    assert not set(first.leadership.owned) & set(second.leadership.owned)


def per_shard_out_of_order(app: Celery, ids: list[str], order: list[str]) -> list[int]:
    """The shards whose tasks did not reach the queue in the order of ``ids`` (their due order)."""
    keys = installation_for(app).store.keys  # type: ignore[union-attr]
    rank = {task_id: i for i, task_id in enumerate(ids)}
    return [shard for shard in range(keys.shards)
            if (mine := [rank[i] for i in order if keys.shard_of(i) == shard]) != sorted(mine)]


def test_heartbeats_in_a_burst_keep_each_shard_in_due_order(apps: AppFactory) -> None:
    """A heartbeat every 0.3 s through a long burst: what it puts back (entries held for the next
    pass, and with them the claim sent ahead, which took later ones) goes out first, at once."""
    _, ours = elsewhere(apps, zset_scheduler_batch_size=40, zset_scheduler_lock_timeout=0.9)
    ids = burst(ours, 16000, per_ms=16)
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    handoff = handoff_of(apps, ours)
    wait_for(lambda: broker.llen("celery") >= len(ids), timeout=90, what="the whole burst in the queue")
    order = [m["headers"]["id"] for m in drain(broker)[b"celery"]]
    assert sorted(order) == sorted(ids)
    assert handoff.claimed_ahead > 5
    assert per_shard_out_of_order(ours, ids, order) == []


def test_a_flushed_script_cache_under_claims_sent_ahead_keeps_due_order_and_one_unacked_batch(
    apps: AppFactory,
) -> None:
    """A fresh server (no script cached): scripts are loaded before a claim is first sent ahead,
    so a crash could publish again at most the last batch (published and still in flight). Flushed
    again mid-burst (a restart, a failover): a call that found none runs again before the next
    claim is sent, so due order holds; the acks it carried wait one pass (two batches, once)."""
    _, ours = elsewhere(apps, zset_scheduler_batch_size=10)
    ids = burst(ours, 600, per_ms=3)
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    dispatcher = build_dispatcher(ours)  # driven pass by pass: the state after each is read
    dispatcher.store.check_meta()
    store = installation_for(ours).store  # type: ignore[union-attr]
    store.client.script_flush()
    seen, worst = 0, []
    for n in range(400):
        if n == 5:
            store.client.script_flush()
        dispatcher.run_once()
        published = [json.loads(m)["headers"]["id"] for m in broker.lrange("celery", 0, -1)]
        last, seen = len(published) - seen, len(published)
        claimed = {task_id_of(m) for shard in range(store.keys.shards)
                   for m in store.client.zrange(store.keys.shard(shard).inflight, 0, -1)}
        unacked = len(set(published) & claimed)
        if unacked > last:
            worst.append((n, unacked, last))
        if seen >= len(ids):
            break
    dispatcher.handoff.settle()
    assert [w for w in worst if w[0] < 5] == [] and len(worst) <= 1, worst
    order = [m["headers"]["id"] for m in drain(broker)[b"celery"]]
    assert sorted(order) == sorted(ids)
    assert per_shard_out_of_order(ours, ids, order) == []


@pytest.mark.parametrize("where", ["old", "grave"])
def test_prefixes_a_collection_set_aside_are_read_by_the_claim(apps: AppFactory, where: str) -> None:
    plain, ours = elsewhere(apps)
    broker = apps.server.client(BROKER_DB)
    calls = [{"args": ("a", n), "task_id": str(uuid.uuid4())} for n in range(12)]
    _, generic, ids = send_all(plain, ours, broker, calls)
    assert set_aside(ours, where) > 0
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert handoff.prebuilt == len(ids)
    for task_id in ids:
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)


def by_hand(app: Celery, pinned: set[int] | None = None) -> tuple[Dispatcher, BuiltHandOff]:
    """A dispatcher that is not run, leading its shards: the test calls its hand-off's passes."""
    dispatcher = build_dispatcher(app, pinned=pinned)
    dispatcher.leadership.beat()
    handoff = dispatcher.handoff
    assert isinstance(handoff, BuiltHandOff)
    return dispatcher, handoff


@pytest.mark.parametrize("read", ["made", "fails"])
def test_a_revoke_before_the_counts_are_read_ahead_of_the_next_claim_is_held_back(
        apps: AppFactory, monkeypatch: pytest.MonkeyPatch, read: str) -> None:
    """Passes driven by hand: a full batch sends the next claim ahead, the revoke counts read just
    before it. A task of the batch revoked before that read is held back at the hand-off, which
    then reads nothing itself; when the read fails, the hand-off reads the counts as before."""
    from celery_zset_scheduler.dispatch import built as built_module
    from celery_zset_scheduler.dispatch import guard as guard_module

    _, ours = elsewhere(apps, shards=1, zset_scheduler_batch_size=5, zset_scheduler_inflight_timeout=60.0)
    ids = burst(ours, 12, per_ms=1)
    _, handoff = by_hand(ours)
    fences = handoff.env.fences()
    assert len(fences) == 1

    reads: list[list[int]] = []
    real_counts, real_changed = built_module.revoke_counts, guard_module.changed_since
    doomed: list[str] = []

    def revoking_then_reading(client: Any, keys: Any, shards: Any) -> dict[int, int]:
        if not doomed:  # the first batch is claimed (in flight): revoke one of it, then read
            flight = {task_id_of(m) for m in installation_for(ours).store.client.zrange(keys.shard(0).inflight, 0, -1)}
            doomed.append(next(i for i in ids if i in flight))
            ours.control.revoke(doomed)
        if read == "fails":
            raise redis.ConnectionError("the read failed")
        return real_counts(client, keys, shards)

    def hand_off_read(client: Any, keys: Any, counts: dict[int, int]) -> set[int]:
        reads.append(sorted(counts))
        return real_changed(client, keys, counts)

    monkeypatch.setattr(built_module, "revoke_counts", revoking_then_reading)
    monkeypatch.setattr(guard_module, "changed_since", hand_off_read)
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    passed = handoff.dispatch(fences)
    assert passed.broker_error is None and handoff.claimed_ahead == 1 and doomed
    published = [m["headers"]["id"] for m in drain(broker).get(b"celery", [])]
    assert doomed[0] not in published and published  # held back, the rest of its batch went
    assert (reads == []) == (read == "made")  # the read made ahead served the hand-off's check
    for _ in range(10):
        if handoff.dispatch(fences).broker_error is None and not in_flight(ours) and not handoff.holding:
            break
    handoff.settle(releasing=True)
    published += [m["headers"]["id"] for m in drain(broker).get(b"celery", [])]
    assert sorted(published) == sorted(set(ids) - set(doomed))  # every other task once
    assert ours.AsyncResult(doomed[0]).state == "REVOKED"


def test_a_shard_acquired_in_a_backlog_joins_the_claims_sent_ahead(apps: AppFactory) -> None:
    """Passes driven by hand: the leader of shard 0 is draining a backlog (each claim sent ahead)
    when it acquires shard 1. Shard 1 is claimed in the next pass before the next claim goes, and
    that claim covers both shards (no claim of it waits behind one sent ahead); every task goes out
    once, each shard's in due order."""
    _, ours = elsewhere(apps, shards=2, zset_scheduler_batch_size=5, zset_scheduler_inflight_timeout=60.0)
    ids = burst(ours, 60, per_ms=1)
    dispatcher, handoff = by_hand(ours, pinned={0})
    broker = redis.Redis.from_url(apps.server.url_db(BROKER_DB))
    handoff.dispatch(handoff.env.fences())
    handoff.dispatch(handoff.env.fences())
    assert handoff._ahead is not None and [f.shard for f in handoff._ahead.fences] == [0]
    dispatcher.leadership.pinned = {0, 1}
    assert dispatcher.leadership.beat().acquired == [1]
    handoff.dispatch(handoff.env.fences())
    assert handoff._ahead is not None and sorted(f.shard for f in handoff._ahead.fences) == [0, 1]
    for _ in range(40):
        handoff.dispatch(handoff.env.fences())
        if not in_flight(ours) and not handoff.holding and handoff._ahead is None:
            break
    handoff.settle(releasing=True)
    order = [m["headers"]["id"] for m in drain(broker).get(b"celery", [])]
    assert sorted(order) == sorted(ids)  # each once
    assert per_shard_out_of_order(ours, ids, order) == []


def test_each_built_entry_keeps_the_arrival_stamp_it_was_stored_with(apps: AppFactory) -> None:
    """The claim returns the stamps apart from the envelopes it built: each entry claimed has the
    arrival stored with it (what orders ties across shards), one stored without a stamp (format 2)
    the earliest arrival, and its payload is the envelope alone."""
    _, ours = elsewhere(apps, shards=1, zset_scheduler_inflight_timeout=60.0)
    ids = burst(ours, 6, per_ms=1)
    _, handoff = by_hand(ours)
    [fence] = handoff.env.fences()
    store = installation_for(ours).store
    assert store is not None
    msg = store.keys.shard(0).msg
    members = [member(i) for i in ids]
    values = dict(zip(ids, store.client.hmget(msg, members), strict=True))
    assert all(v[:1] == b"\x01" for v in values.values())  # stamped as stored today
    store.client.hset(msg, members[2], values[ids[2]][STAMP_BYTES:])  # as format 2 stored it
    expected = {i: split(v)[0] for i, v in values.items()} | {ids[2]: UNSTAMPED}
    assert handoff.lane is not None
    claimed = claim_built_many(handoff.env.claims, [fence], handoff.lane[1](), **handoff._claim_args())
    result = claimed.results[0]
    assert not isinstance(result, Exception)
    entries = {e.task_id: e for e in result.entries}
    assert set(entries) == set(ids) and all(e.built_for for e in entries.values())
    assert {i: e.arrival for i, e in entries.items()} == expected
    assert len(set(expected.values())) == len(ids)  # six arrivals, none the same
    for task_id, entry in entries.items():
        assert json.loads(entry.payload)["headers"]["id"] == task_id
