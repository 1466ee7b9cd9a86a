"""The private internals the fast paths read: checked once, and their public paths write the
same messages (a real app, Redis broker and dispatcher; a library release that lacks one is a
method taken away from its class for the test's length)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu.transport.redis import Channel as RedisChannel

from celery_zset_scheduler.celery.core.compat import LANE
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.celery.dispatcher import build as _dispatcher  # noqa: F401  (registers the publishers' internals)
from celery_zset_scheduler.celery.publishers.kombu_internals import KOMBU_REDIS
from celery_zset_scheduler.dispatch.fastpath import FastHandOff
from celery_zset_scheduler.dispatch.generic import GenericHandOff
from celery_zset_scheduler.model import internals
from celery_zset_scheduler.store import resp
from celery_zset_scheduler.store.resp import READER

from ..support.helpers import STORE_DB, AppFactory, executions, wait_for
from .test_fast_path import assert_same_envelope, dispatched, drain, field_cases, same_db, send_all


@pytest.fixture
def fresh() -> Iterator[None]:
    internals.reset()
    yield
    internals.reset()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "zset_event", None) == "internals.public"]


def test_every_internal_is_as_its_check_expects_on_this_release(fresh: None) -> None:
    decided = internals.check_all()
    assert decided == {READER.name: True, KOMBU_REDIS.name: True, LANE.name: True}
    for item in internals.registered():
        assert item.reads and all("._" in name for name in item.reads), item
        assert "docs/design.md#private-internals" in item.public


def test_a_failing_check_logs_one_warning_and_keeps_its_path_off(fresh: None, caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def differs() -> str | None:
        calls.append(1)
        raise AttributeError("'Thing' object has no attribute '_gone'")

    item = internals.Internal("a test's path", ("lib.Thing._gone",), "the slow way", differs)
    with caplog.at_level(logging.WARNING, logger="celery_zset_scheduler"):
        assert [internals.usable(item) for _ in range(3)] == [False, False, False]
    assert len(calls) == 1
    (record,) = warnings_of(caplog)
    assert record.levelno == logging.WARNING
    fields = record.zset_fields  # type: ignore[attr-defined]
    assert fields["instead"] == repr("the slow way") and "_gone" in fields["differs"]
    assert fields["reads"] == "lib.Thing._gone"


@pytest.mark.default_user("the ACL rules read the settings, which refuse")
def test_the_setting_is_refused_unless_auto_or_public(apps: AppFactory) -> None:
    from celery_zset_scheduler.errors import ConfigurationError

    app = apps(zset_scheduler_internals="fast")
    inst = installation_for(app)
    assert inst is not None
    with pytest.raises(ConfigurationError, match="zset_scheduler_internals: expected 'auto' or 'public', got 'fast'"):
        inst.settings  # noqa: B018


def test_public_path_forced_by_the_setting_publishes_what_celery_would(
        apps: AppFactory, fresh: None, caplog: pytest.LogCaptureFixture) -> None:
    """Same-Redis broker: the fast path would take these; forced public, the lane, the script and
    the batch transaction are left out, and each message is Kombu's own publish of it."""
    with caplog.at_level(logging.INFO, logger="celery_zset_scheduler"):
        plain, ours = same_db(apps, zset_scheduler_internals="public")
        inst = installation_for(ours)
        assert inst is not None and inst.settings.internals == "public"
    assert internals.forced() and not internals.usable(KOMBU_REDIS)
    assert [r for r in caplog.records if getattr(r, "zset_event", None) == "internals.forced_public"]
    broker = apps.server.client(STORE_DB)
    calls = field_cases()
    theirs, generic, ids = send_all(plain, ours, broker, calls)
    assert inst.lane is not None and not inst.lane.usable and inst.lane.taken == 0
    dispatcher = apps.dispatcher(ours)
    assert type(dispatcher.handoff) is GenericHandOff
    mine: dict[str, Any] = {}
    wait_for(lambda: mine.update(_by_id(drain(broker))) or len(mine) >= len(ids), what="the published messages")
    assert set(mine) == set(theirs) == set(generic) == set(ids)
    for task_id in ids:
        assert mine[task_id][0] == theirs[task_id][0] == generic[task_id][0]
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)
        assert_same_envelope(mine[task_id][1], generic[task_id][1], plain=False)


def _by_id(found: dict[bytes, list[dict[str, Any]]]) -> dict[str, tuple[bytes, dict[str, Any]]]:
    return {m["headers"]["id"]: (key, m) for key, messages in found.items() for m in messages}


def test_a_kombu_release_without_a_step_takes_kombus_publish_and_runs_every_task_once(
        apps: AppFactory, fresh: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(RedisChannel, "_q_for_pri", _q_for_pri_renamed)
    _, ours = same_db(apps)
    with caplog.at_level(logging.WARNING, logger="celery_zset_scheduler"):
        dispatcher = apps.dispatcher(ours)
    assert type(dispatcher.handoff) is GenericHandOff  # not the same-Redis script
    (warning,) = warnings_of(caplog)
    assert "_q_for_pri" in warning.zset_fields["differs"]  # type: ignore[attr-defined]
    assert "Producer.publish" in warning.zset_fields["instead"]  # type: ignore[attr-defined]
    apps.worker(ours)
    results = [ours.tasks["t.record"].apply_async((f"k{i}",), countdown=0.3) for i in range(20)]
    wait_for(lambda: len(executions(apps.record_url)) >= 20, what="every task run")
    ran = [e["id"] for e in executions(apps.record_url)]
    assert sorted(ran) == sorted(r.id for r in results)  # each once
    assert len(warnings_of(caplog)) == 1


def _q_for_pri_renamed(self: Any, name: str, level: int) -> str:
    """Kombu's own step with its parameters named otherwise, as a later release might."""
    pri = self.priority(level)
    return f"{name}{self.sep}{pri}" if pri else name


def test_the_fast_path_still_runs_where_the_checks_pass(apps: AppFactory, fresh: None) -> None:
    plain, ours = same_db(apps)
    broker = apps.server.client(STORE_DB)
    theirs, _, ids = send_all(plain, ours, broker, field_cases()[:2])
    handoff, mine = dispatched(apps, ours, broker, ids)
    assert isinstance(handoff, FastHandOff) and handoff.pushed == len(ids)
    for task_id in ids:
        assert_same_envelope(mine[task_id][1], theirs[task_id][1], plain=True)


def test_the_reader_forced_public_reads_the_same_replies(redis_server: Any, fresh: None) -> None:
    client = redis.Redis.from_url(redis_server.url_db(5))
    client.flushdb()
    client.rpush("l", *[b"x" * n for n in range(50)])
    commands = [("LRANGE", "l", 0, -1), ("LLEN", "l"), ("GET", "missing"), ("INCRBY", "l", 1), ("HGETALL", "nope")]
    fast = resp.exchange(client, commands)
    internals.force_public("test")
    public = resp.exchange(client, commands)
    assert fast is not None and public is not None
    assert [type(x) for x in fast] == [type(x) for x in public]
    assert fast[:3] == public[:3] == [[b"x" * n for n in range(50)], 50, None]
    assert isinstance(fast[3], redis.ResponseError) and str(fast[3]) == str(public[3])
    assert fast[4] == public[4]
