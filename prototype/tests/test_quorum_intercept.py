# mypy: disallow-untyped-calls=False, disallow-untyped-decorators=False
"""Quorum queues and Celery's native delayed delivery, on a real RabbitMQ with real workers:
what reaches ``send_task_message`` after ``send_task`` rewrote a countdown, what Celery then does
with it, and an interception that keeps the original routing for a store of timed tasks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.transport.native_delayed_delivery import _delay_prefix_re, calculate_routing_key

from celery_zset_scheduler.testing import RedisServer
from prototype.confirm_publisher import ConfirmPublisher
from prototype.quorum_intercept import DELAY_EXCHANGE, ZSetStore, dispatch_due, install
from tests.support.rabbitmq import RabbitMQ

RUNS = "zt:runs"
TOPIC = Exchange("zt.tasks", type="topic")
QUORUM = Queue("zt.qq", TOPIC, routing_key="zt.qq", queue_arguments={"x-queue-type": "quorum"})
CLASSIC_ON_TOPIC = Queue("zt.classic", TOPIC, routing_key="zt.classic")
QUORUM_ON_DIRECT = Queue("zt.qq-direct", Exchange("zt.direct", type="direct"), routing_key="zt.qq-direct",
                         queue_arguments={"x-queue-type": "quorum"})


@dataclass
class Env:
    app: Celery
    url: str
    vhost: str
    redis: redis.Redis
    rabbitmq: RabbitMQ

    def runs(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.lrange(RUNS, 0, -1)]

    def count(self, queue: str) -> int:
        return self.rabbitmq.message_count(queue, url=self.url)

    def wait_runs(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.runs()) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.runs())} of {n} tasks ran within {timeout}s")
            time.sleep(0.05)
        return self.runs()


def make_app(url: str, redis_url: str, queues: list[Queue]) -> Celery:
    app = Celery("zt-quorum", broker=url, set_as_current=False)
    app.conf.update(
        task_queues=queues, task_default_queue=queues[0].name, task_default_exchange=queues[0].exchange.name,
        task_default_exchange_type=queues[0].exchange.type, task_default_routing_key=queues[0].routing_key,
        task_ignore_result=True, broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
    )
    recorder = redis.Redis.from_url(redis_url)

    @app.task(name="zt.record", bind=True, shared=False)
    def record(self: Any, tag: str, sent: float) -> None:
        info = self.request.delivery_info or {}
        recorder.rpush(RUNS, json.dumps({"tag": tag, "sent": sent, "at": time.time(),
                                         "exchange": info.get("exchange"), "routing_key": info.get("routing_key")}))

    return app


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def env(rabbitmq: RabbitMQ, redis_server: RedisServer, request: pytest.FixtureRequest) -> Iterator[Env]:
    # A vhost of its own: the worker declares 28 delay exchanges and queues there.
    queues = getattr(request, "param", [QUORUM])
    with rabbitmq.fresh_vhost() as url:
        client = redis_server.client()
        client.flushall()
        app = make_app(url, redis_server.url, queues)
        try:
            yield Env(app, url, url.rsplit("/", 1)[1], client, rabbitmq)
        finally:
            app.close()
            client.close()


def record_options(app: Celery) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Replace the app's send_task_message by one that records (options, headers), sends nothing."""
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> None:
        seen.append((options, message[0]))

    app.amqp.send_task_message = send_task_message
    return seen


# -- what Celery does ------------------------------------------------------------------------------

def test_send_task_rewrites_a_countdown_before_send_task_message(env: Env) -> None:
    seen = record_options(env.app)
    env.app.tasks["zt.record"].apply_async(("a", 0.0), countdown=3)
    [(options, headers)] = seen
    assert headers["eta"]  # the message still says when
    assert "queue" not in options  # popped: the queue cannot be recovered
    assert (options["exchange"].name, options["exchange"].type) == (DELAY_EXCHANGE, "topic")
    assert options["routing_key"] == calculate_routing_key(3, "zt.qq") == "0." * 26 + "1.1.zt.qq"
    # The routing key can be stripped back; the exchange (zt.tasks) is named nowhere.
    assert _delay_prefix_re.sub("", options["routing_key"]) == "zt.qq"
    assert "zt.tasks" not in json.dumps({k: str(v) for k, v in options.items()})


def test_an_eta_is_turned_into_whole_seconds(env: Env) -> None:
    seen = record_options(env.app)
    eta = datetime.now(timezone.utc) + timedelta(seconds=10.9)
    env.app.tasks["zt.record"].apply_async(("a", 0.0), eta=eta)
    [(options, _)] = seen
    # send_task recomputes a countdown from the eta and truncates it: 10.9 s ahead -> 10 s of delay.
    assert options["routing_key"] == calculate_routing_key(10, "zt.qq")


def test_a_countdown_under_one_second_fails_the_call(env: Env) -> None:
    record_options(env.app)
    # int(0.5) == 0, which calculate_routing_key refuses: the apply_async itself raises.
    with pytest.raises(ValueError, match="countdown must be a positive number"):
        env.app.tasks["zt.record"].apply_async(("a", 0.0), countdown=0.5)


@pytest.mark.parametrize("env", [[QUORUM, CLASSIC_ON_TOPIC]], indirect=True)
def test_any_quorum_queue_in_the_app_switches_every_topic_queue_to_delayed_delivery(env: Env) -> None:
    seen = record_options(env.app)
    env.app.tasks["zt.record"].apply_async(("a", 0.0), countdown=3, queue="zt.classic")
    [(options, _)] = seen
    assert options["exchange"].name == DELAY_EXCHANGE  # although zt.classic is a classic queue
    assert options["routing_key"].endswith(".zt.classic")


@pytest.mark.parametrize("env", [[QUORUM_ON_DIRECT]], indirect=True)
def test_a_direct_exchange_is_left_alone(env: Env) -> None:
    seen = record_options(env.app)
    env.app.tasks["zt.record"].apply_async(("a", 0.0), countdown=3)
    [(options, headers)] = seen
    assert options["queue"].name == "zt.qq-direct" and "exchange" not in options
    assert headers["eta"]  # a plain ETA message: the worker would hold it until due


def test_celery_runs_it_through_the_delay_queues(env: Env) -> None:
    task = env.app.tasks["zt.record"]
    with start_worker(env.app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        sent = time.time()
        task.apply_async(("native", sent), countdown=3)
        time.sleep(0.5)
        # Parked in the 2 s level (3 = 0b11: 2 s, then 1 s), not in the task's queue.
        assert env.count("zt.qq") == 0
        assert env.count("celery_delayed_1") == 1
        [run] = env.wait_runs(1)
    assert 2.9 <= run["at"] - sent < 8
    # It arrives dead-lettered through the delivery exchange, with the delay bits still on its key.
    assert run["exchange"] == "celery_delayed_delivery"
    assert run["routing_key"] == calculate_routing_key(3, "zt.qq")
    quorum_delay_queues = [q for q in env.rabbitmq.queues(env.vhost) if q.name.startswith("celery_delayed_")]
    assert len(quorum_delay_queues) == 28 and {q.type for q in quorum_delay_queues} == {"quorum"}


def test_without_a_worker_having_declared_the_delay_exchanges_the_task_is_lost(env: Env) -> None:
    """The publish goes to an exchange that does not exist yet: the broker closes the channel,
    and without publisher confirms apply_async never hears of it."""
    sent = time.time()
    env.app.tasks["zt.record"].apply_async(("lost", sent), countdown=1)  # does not raise
    with start_worker(env.app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        time.sleep(4)
        assert env.runs() == []
        assert env.count("zt.qq") == 0


# -- the interception ------------------------------------------------------------------------------

def test_the_interception_stores_the_original_routing_and_publishes_it_when_due(env: Env) -> None:
    store = ZSetStore(env.redis)
    uninstall = install(env.app, store)
    task = env.app.tasks["zt.record"]
    sent = time.time()
    task.apply_async(("stored", sent), countdown=3)
    task.apply_async(("short", sent), countdown=0.5)  # Celery itself would raise here
    [first, second] = sorted(store.entries(), key=lambda e: str(e["headers"]["argsrepr"]))
    for entry in (first, second):
        assert (entry["exchange"], entry["routing_key"], entry["queue"]) == ("zt.tasks", "zt.qq", "zt.qq")
        assert entry["headers"]["eta"] is None  # cleared in the stored form: due when published
    scored: list[tuple[bytes, float]] = env.redis.zrange(store.key, 0, -1, withscores=True)  # type: ignore[assignment]
    due = sorted(score for _, score in scored)
    assert [round(score / 1000 - sent, 1) for score in due] == [0.5, 3.0]
    # Nothing reached RabbitMQ: no delay queues exist, the task queue is empty.
    assert not [q for q in env.rabbitmq.queues(env.vhost) if q.name.startswith("celery_delayed_")]

    stop = threading.Event()

    def dispatcher() -> None:
        with ConfirmPublisher(Connection(env.url)) as publisher:
            while not stop.is_set():
                dispatch_due(env.app, store, publisher)
                time.sleep(0.05)

    thread = threading.Thread(target=dispatcher, daemon=True)
    thread.start()
    try:
        with start_worker(env.app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
            task.apply_async(("now", time.time()))  # untimed: straight to the queue, as before
            runs = {run["tag"]: run for run in env.wait_runs(3)}
    finally:
        stop.set()
        thread.join(10)
    assert store.entries() == []
    assert 3.0 <= runs["stored"]["at"] - sent < 8  # never early: the due time is rounded up
    assert 0.5 <= runs["short"]["at"] - sent < 5
    # Published straight to the queue's own exchange and routing key: no delay bits, no DLX.
    for tag in ("stored", "short", "now"):
        assert (runs[tag]["exchange"], runs[tag]["routing_key"]) == ("zt.tasks", "zt.qq"), tag
    uninstall()


def test_the_capture_strategy_restores_the_routing_but_not_the_rest(env: Env) -> None:
    store = ZSetStore(env.redis)
    install(env.app, store, strategy="capture")
    task = env.app.tasks["zt.record"]
    task.apply_async(("captured", 0.0), countdown=3)
    [entry] = store.entries()
    assert (entry["exchange"], entry["routing_key"], entry["queue"]) == ("zt.tasks", "zt.qq", "zt.qq")
    # Celery's rewrite still ran inside send_task, with its limits.
    with pytest.raises(ValueError, match="countdown must be a positive number"):
        task.apply_async(("short", 0.0), countdown=0.5)


def test_a_short_countdown_is_left_to_celery(env: Env) -> None:
    seen: list[dict[str, Any]] = []
    original = env.app.amqp.send_task_message

    def spy(producer: Any, name: str, message: Any, **options: Any) -> Any:
        seen.append(options)
        return original(producer, name, message, **options)

    env.app.amqp.send_task_message = spy
    store = ZSetStore(env.redis)
    install(env.app, store, min_countdown=10)
    env.app.tasks["zt.record"].apply_async(("native", 0.0), countdown=3)
    assert store.entries() == []
    [options] = seen
    assert options["exchange"].name == DELAY_EXCHANGE  # Celery's own delayed delivery


@pytest.mark.parametrize("strategy", ["untimed", "capture"])
def test_a_caller_supplied_router_is_honoured(env: Env, strategy: str) -> None:
    store = ZSetStore(env.redis)
    install(env.app, store, strategy=strategy)

    class ToClassic:
        def route(self, options: dict[str, Any], name: str, args: Any = (), kwargs: Any = None,
                  task_type: Any = None) -> dict[str, Any]:
            return {**options, "queue": CLASSIC_ON_TOPIC}

    env.app.send_task("zt.record", ("routed", 0.0), countdown=3, router=ToClassic())
    [entry] = store.entries()
    assert (entry["exchange"], entry["routing_key"], entry["queue"]) == ("zt.tasks", "zt.classic", "zt.classic")
