"""Helpers of the CLI and metrics tests: invoking the real ``zset`` group, making dead letters,
and the environment of ``celery -A tests.support.cli_app`` subprocesses."""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from celery import Celery
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

import celery_zset_scheduler
from celery_zset_scheduler.celery.cli import zset
from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.model.codec import StoredMessage
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.testing import RedisServer

from .helpers import BROKER_DB, STORE_DB

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository


def invoke(app: Celery, *args: Any, input: str | None = None, catch: bool = False) -> Result:
    """Run ``celery zset ARGS`` in process, as Celery's own CLI would (its CLIContext as obj)."""
    obj = CLIContext(app=app, no_color=True, workdir=None)
    return CliRunner().invoke(zset, [str(a) for a in args], obj=obj, input=input, catch_exceptions=catch)


def out(result: Result) -> Any:
    """The JSON a command printed on stdout."""
    assert result.exit_code in (0, 3), (result.exit_code, result.output)
    return json.loads(result.stdout)


def template(app: Celery, **kwargs: Any) -> StoredMessage:
    """A real stored message of ``t.record``, made by apply_async and taken out of the store."""
    result = app.tasks["t.record"].apply_async(kwargs=kwargs, countdown=3600)
    found = celery_zset_scheduler.lookup(app, result.id)
    assert found is not None and found[1] is not None
    celery_zset_scheduler.cancel(app, result.id)
    return found[1]


def with_id(message: StoredMessage, task_id: str, task_name: str | None = None) -> StoredMessage:
    headers = {**message.headers, "id": task_id, "root_id": task_id}
    if task_name is not None:
        headers["task"] = task_name
    return replace(message, task_id=task_id, headers=headers,
                   properties={**message.properties, "correlation_id": task_id})


def dead_letter(app: Celery, message: StoredMessage, **fields: Any) -> DeadLetter:
    """Add ``message`` to the app's dead-letter store as a task that ran out of retries."""
    defaults: dict[str, Any] = {
        "exc_type": "ValueError", "exc_message": "boom", "attempts": 4,
        "traceback": "Traceback (most recent call last):\n  ...\nValueError: boom\n",
        "args": [], "kwargs": {"tag": "dead"}, "worker": "celery@test",
    }
    letter = DeadLetter.for_message(message, fields.pop("reason", "retries_exhausted"), **{**defaults, **fields})
    ensure_installation(app).dead_letters.add(letter)
    return letter


def cli_env(server: RedisServer, **conf: Any) -> dict[str, str]:
    """Environment of a ``celery -A tests.support.cli_app`` subprocess on ``server``."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ZSET_CLI_BROKER": server.url_db(BROKER_DB),
        "ZSET_CLI_STORE": server.url_db(STORE_DB),
        "ZSET_CLI_CONF": json.dumps(conf),
    }


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` as ``{(name, sorted labels): value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def total(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    """The sum of ``name`` over the samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))
