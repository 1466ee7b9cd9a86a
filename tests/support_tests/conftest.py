"""The private RabbitMQ for these tests (tests/support/rabbitmq.py)."""

from __future__ import annotations

from tests.support.rabbitmq import rabbitmq_fixture, rabbitmq_url_fixture

rabbitmq = rabbitmq_fixture()
rabbitmq_url = rabbitmq_url_fixture()
