"""What a worker would discard is dead-lettered before the hand-off, never published and lost;
an id in ``due`` without a message is logged and counted, not dropped without a trace."""

from __future__ import annotations

import pickle
import time
from collections.abc import Mapping

import pytest
import redis

from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.dispatch.observer import Observer
from celery_zset_scheduler.model.codec import StoredMessage, encode

from ..support.helpers import BROKER_DB, AppFactory, built_message, wait_for


class Counting(Observer):
    def __init__(self) -> None:
        self.orphans: dict[int, int] = {}
        self.dead: dict[str, int] = {}

    def orphaned(self, shard: int, count: int) -> None:
        self.orphans[shard] = self.orphans.get(shard, 0) + count

    def dead_lettered(self, reason: str, count: int) -> None:
        self.dead[reason] = self.dead.get(reason, 0) + count


def foreign(good: StoredMessage, **changes: object) -> StoredMessage:
    """What another program could write into the store: a real message with a part replaced."""
    fields = {**good.__dict__, **changes}
    return StoredMessage(**fields)  # type: ignore[arg-type]


CASES: Mapping[str, dict[str, object]] = {
    "pickle": {"content_type": "application/x-python-serialize", "content_encoding": "binary",
               "body": pickle.dumps(((1,), {}, {}))},
    "broken_json": {"body": b"[[1], {\"tag\": "},
    "not_a_task_body": {"body": b"{\"just\": \"a dict\"}", "headers": {"task": "t.record", "retries": "x"}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_message_the_worker_would_discard_is_dead_lettered(apps: AppFactory, r: redis.Redis, case: str) -> None:
    app = apps()
    store = apps.store(app)
    good = built_message(app.tasks["t.record"], kwargs={"tag": "fine"})
    bad = foreign(built_message(app.tasks["t.record"], kwargs={"tag": "bad"}), **CASES[case])
    now = int(time.time() * 1000)
    store.schedule(bad.task_id, now, encode(bad))
    store.schedule(good.task_id, now + 50, encode(good))
    seen = Counting()
    apps.dispatcher(app, observer=seen)
    apps.worker(app)
    assert app.AsyncResult(good.task_id).get(timeout=20) == "fine"
    letters = installation_for(app).dead_letters  # type: ignore[union-attr]
    letter = wait_for(lambda: letters.get(bad.task_id), what="the discarded message dead-lettered")
    assert (letter.reason, letter.exc_type, letter.worker) == ("invalid", "InvalidMessage", "dispatcher")
    assert letter.original().body == bad.body  # kept byte for byte, for a person to look at
    assert seen.dead == {"invalid": 1}
    assert store.get(bad.task_id) is None  # acked: it does not come back
    broker = redis.Redis(port=r.connection_pool.connection_kwargs["port"], db=BROKER_DB)
    assert bad.task_id.encode() not in b"".join(broker.lrange("celery", 0, -1))
    assert [run["tag"] for run in apps.executions()] == ["fine"]


def test_the_reason_names_what_is_wrong(apps: AppFactory) -> None:
    app = apps()
    from celery_zset_scheduler.celery.core.messages import MessageCheck

    check = MessageCheck(("json",))
    good = built_message(app.tasks["t.record"], kwargs={"tag": 1})
    assert check(good) is None
    assert "not in zset_scheduler_accept_content (json)" in str(check(foreign(good, **CASES["pickle"])))
    assert "does not decode as application/json" in str(check(foreign(good, **CASES["broken_json"])))
    assert "retries header is malformed" in str(check(foreign(good, **CASES["not_a_task_body"])))


def test_an_id_due_without_its_message_is_logged_and_counted(apps: AppFactory, r: redis.Redis,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    app = apps(shards=1)
    store = apps.store(app)
    store.schedule("kept", int(time.time() * 1000), encode(built_message(app.tasks["t.record"], kwargs={"tag": 1})))
    r.zadd(store.keys.shard(0).due, {"orphan-1": 1, "orphan-2": 2})  # written by another program
    seen = Counting()
    with caplog.at_level("ERROR", logger="celery_zset_scheduler"):
        apps.dispatcher(app, observer=seen)
        wait_for(lambda: seen.orphans.get(0) == 2, what="the orphans counted")
    assert any("orphan.dropped" in m and "orphan-1" in m for m in caplog.messages)
    assert r.zcard(store.keys.shard(0).due) == 0
