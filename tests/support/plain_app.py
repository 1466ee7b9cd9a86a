"""A Celery app that knows nothing of celery-zset-scheduler (it never imports it), configured from
the same environment variables as :mod:`.proc_app`: a worker as one started without the plugin."""

from __future__ import annotations

import os

from celery import Celery

app = Celery("plain_app", set_as_current=False)
app.conf.update({
    "broker_url": os.environ["ZSET_TEST_BROKER"],
    "broker_connection_retry_on_startup": True,
})


@app.task(name="t.record")
def record(tag: object = None, **_: object) -> object:
    return tag
