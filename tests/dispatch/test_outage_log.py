"""An outage's log line says what failed and where, never with the password."""

from __future__ import annotations

import logging
import threading

import pytest

from celery_zset_scheduler.celery.publishers.kombu import KombuPublisher
from celery_zset_scheduler.dispatch.loop import Dispatcher
from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.client import make_client
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import AppFactory, wait_for


def test_a_redis_outage_is_logged_with_its_reason_and_the_masked_store_url(
    apps: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisServer() as gone:
        port = gone.port
    store = Store(make_client(f"redis://alice:s3cret@127.0.0.1:{port}/0"), KeySpace("zt", 2))
    dispatcher = Dispatcher(store, KombuPublisher(apps()))
    caplog.set_level(logging.WARNING, logger="celery_zset_scheduler")
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    try:
        record = wait_for(lambda: next((r for r in caplog.records if "outage.started" in r.getMessage()), None),
                          what="the outage to be logged")
    finally:
        dispatcher.stop()
        thread.join(timeout=10)
    line = record.getMessage()
    assert f"store=redis://alice:***@127.0.0.1:{port}/0" in line
    assert f"error=ConnectionError: Error 111 connecting to 127.0.0.1:{port}. Connection refused." in line
    assert "s3cret" not in line and "network:" not in line
    assert record.zset_fields["error"].startswith("ConnectionError: Error 111")  # type: ignore[attr-defined]
