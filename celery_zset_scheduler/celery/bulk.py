"""Bulk scheduling: many calls of one task stored in pipelined chunks.

One message is built through Celery's normal path (routing, options, signals, serializer), then
used as a template: each call gets its own id, body and ``argsrepr``/``kwargsrepr``, everything
else (routing, priority, headers, origin) is the template's. ``before_task_publish`` therefore fires
once per bulk call, not once per task.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from celery.utils.saferepr import saferepr
from kombu.compression import compress
from kombu.serialization import dumps, loads, registry

from ..codec import StoredMessage, encode
from ..store import NewEntry
from .installation import ensure_installation
from .sender import capture, eta_to_ms

FLUSH_EVERY = 10_000
REPR_MAX = 1024  # Celery's argsrepr_maxsize

Call = tuple[Sequence[Any], dict[str, Any], "float | datetime"]


def schedule_many(task: Any, calls: Iterable[Call], **options: Any) -> list[str]:
    """Store ``task(*args, **kwargs)`` for every ``(args, kwargs, when)``; returns the task ids.

    ``when`` is a countdown in seconds or an ``eta`` datetime. ``options`` are ``apply_async``
    options shared by every call (``queue``, ``priority``, ``headers``...).
    """
    app = task.app
    inst = ensure_installation(app)
    iterator = iter(calls)
    try:
        first = next(iterator)
    except StopIteration:
        return []
    template = _template(task, first, options)
    embed = loads(template.body, template.content_type, template.content_encoding, accept=[template.content_type])[2]
    serializer = registry.type_to_name[template.content_type]
    compression = template.headers.get("compression")
    own_root = template.headers.get("root_id") == template.task_id
    ids: list[str] = []
    entries: list[NewEntry] = []
    now = time.time()
    for args, kwargs, when in _chain(first, iterator):
        task_id = str(uuid.uuid4())
        _, _, body = dumps((list(args), dict(kwargs), embed), serializer=serializer)
        if isinstance(body, str):
            body = body.encode("utf-8")
        if compression:
            body, _ = compress(body, compression)
        headers = {**template.headers, "id": task_id, "argsrepr": _repr(tuple(args)), "kwargsrepr": _repr(kwargs)}
        if own_root:
            headers["root_id"] = task_id
        message = replace(template, task_id=task_id, body=body, headers=headers,
                          properties={**template.properties, "correlation_id": task_id})
        entries.append(NewEntry(task_id, _due_ms(app, when, now), encode(message)))
        ids.append(task_id)
        if len(entries) >= FLUSH_EVERY:
            inst.store.schedule_many(entries)
            entries = []
    if entries:
        inst.store.schedule_many(entries)
    return ids


def _template(task: Any, first: Call, options: dict[str, Any]) -> StoredMessage:
    captured: list[StoredMessage] = []
    token = capture.set(captured)
    try:
        args, kwargs, _ = first
        # Far enough ahead that the store path (not min_countdown's broker path) builds it.
        task.apply_async(args=args, kwargs=kwargs, countdown=10 * 365 * 86400, **options)
    finally:
        capture.reset(token)
    if not captured:
        raise RuntimeError("the template message was not built through the store path")
    return captured[0]


def _chain(first: Call, rest: Iterable[Call]) -> Iterable[Call]:
    yield first
    yield from rest


def _repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= REPR_MAX else saferepr(value, REPR_MAX)


def _due_ms(app: Any, when: float | datetime, now: float) -> int:
    if isinstance(when, datetime):
        return eta_to_ms(app, when)
    return math.ceil((now + float(when)) * 1000)


__all__ = ["schedule_many"]
