# mypy: disallow-untyped-calls=False
"""Helpers of the RabbitMQ tests: a vhost per test, apps on it, reading a queue back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu.connection import Connection
from kombu.entity import Exchange, Queue

from .helpers import AppFactory
from .rabbitmq import RabbitMQ

EXCHANGE = Exchange("zt.tasks", type="topic")


def quorum(name: str, exchange: Exchange = EXCHANGE) -> Queue:
    return Queue(name, exchange, routing_key=name, queue_arguments={"x-queue-type": "quorum"})


def classic(name: str, exchange: Exchange = EXCHANGE) -> Queue:
    return Queue(name, exchange, routing_key=name)


@pytest.fixture
def vhost(rabbitmq: RabbitMQ) -> Iterator[str]:
    """The URL of a vhost of this test's own (deleted afterwards)."""
    if not rabbitmq.supports_quorum_queues():
        pytest.skip("this RabbitMQ has no quorum queues")
    with rabbitmq.fresh_vhost() as url:
        yield url


def amqp_app(apps: AppFactory, url: str, queues: list[Queue] | None = None, **conf: Any) -> Celery:
    """An installed app with RabbitMQ at ``url`` as its broker and the suite's Redis as its store."""
    options: dict[str, Any] = {"broker_url": url, "broker_connection_timeout": 4}
    if queues:
        first = queues[0]
        options.update(task_queues=queues, task_default_queue=first.name,
                       task_default_exchange=first.exchange.name, task_default_exchange_type=first.exchange.type,
                       task_default_routing_key=first.routing_key)
    return apps(**{**options, **conf})


def drain_ids(url: str, queue: str, idle: float = 2.0, timeout: float = 120.0) -> list[str]:
    """Every task id in ``queue`` (consumed and acked), duplicates kept: read until nothing more
    arrives for ``idle`` seconds."""
    ids: list[str] = []
    with Connection(url) as conn:
        channel = conn.channel()
        channel.basic_qos(0, 1000, False)

        def take(message: Any) -> None:
            ids.append(str(message.properties["application_headers"]["id"]))
            channel.basic_ack(message.delivery_tag)

        channel.basic_consume(queue, callback=take)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                conn.drain_events(timeout=idle)
            except TimeoutError:
                break
    return ids


def get_one(url: str, queue: str) -> Any:
    """One message of ``queue`` (acked), or None."""
    with Connection(url) as conn:
        return conn.default_channel.basic_get(queue, no_ack=True)


def count(url: str, queue: str) -> int:
    """Ready messages of ``queue`` (a passive declare); 0 when it does not exist (yet)."""
    with Connection(url) as conn:
        try:
            _, n, _ = conn.default_channel.queue_declare(queue=queue, passive=True)
        except conn.channel_errors as exc:
            if getattr(exc, "code", None) == 404:
                return 0
            raise
        return int(n)
