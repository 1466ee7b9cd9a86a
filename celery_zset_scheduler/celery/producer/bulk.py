"""Bulk scheduling: many calls of one task streamed into the store.

One message is built through Celery's normal path (``apply_async``: routing, options, signals,
serializer) with the sender's ``zset_template`` option, which hands its stored form back instead
of storing it; it is then used as a template: each call gets its own id, body and
``argsrepr``/``kwargsrepr`` and ``eta`` (written as UTC), everything else (routing, priority, headers,
origin) is the template's.
``before_task_publish`` therefore fires once per bulk call, not once per task.

The per-task work is the hot path (the target is 150k tasks/s): for Kombu's JSON serializer
without compression (Celery's default) the body is one C-encoder call and the stored entry is the
template's pre-encoded bytes around the per-task values (:class:`~...model.template.Template`), byte for byte
what the generic path stores. Other serializers take the generic path (message, then ``encode``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import redis
from kombu.compression import compress, decompress
from kombu.serialization import dumps, loads, registry
from kombu.utils import json as kombu_json

from ...errors import StoreUnavailable
from ...model.codec import EMBED_SUFFIX, StoredMessage, encode
from ...model.headers import IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_OPTION, TEMPLATE_OPTION
from ...model.template import Template
from ...model.times import countdown_ms, datetime_us, eta_ms, us_isoformat
from ...model.urls import mask_url
from ...store.pending import Store
from ...store.schedule import NewEntry
from ..core.compat import REPR_LEVELS, json_codec, repr_levels
from ..core.messages import TaskNotSerializable
from ..core.state import ensure_installation
from .reprs import argsrepr

REPR_MAX = 1024  # Celery's argsrepr_maxsize
KEYED_CHUNK = 5_000  # calls with idempotency keys per pipelined schedule_many
_ID_BLOCK = 1024  # ids made from one os.urandom call

Call = tuple[Sequence[Any], dict[str, Any], "float | datetime"]
Builder = Callable[[str, Sequence[Any], dict[str, Any], int], bytes]
When = Callable[["float | datetime"], tuple[int, int]]


def schedule_many(task: Any, calls: Iterable[Call], **options: Any) -> list[str]:
    """Store ``task(*args, **kwargs)`` for every ``(args, kwargs, when)``; returns the task ids.

    ``when`` is a countdown in seconds or an ``eta`` datetime. ``options`` are ``apply_async``
    options shared by every call (``queue``, ``priority``, ``headers``...). For a task with an
    ``idempotency_key`` (``IdempotentTask``) each call gets its own key, and a call whose key is
    already pending keeps the pending entry: its place in the result is that entry's id.
    Not atomic: after an error, the calls stored before it stay stored.
    """
    if IDEMPOTENCY_KEY_OPTION in options:
        raise ValueError("schedule_many: one idempotency_key for every call would keep only one; "
                         "give the task an idempotency_key format string or callable instead")
    app = task.app
    inst = ensure_installation(app)
    iterator = iter(calls)
    try:
        first = next(iterator)
    except StopIteration:
        return []
    template = _per_call(_template(task, first, options))
    key_for: Callable[[tuple[Any, ...], dict[str, Any]], str | None] | None = getattr(task, "key_for", None)
    keyed = key_for is not None and key_for(tuple(first[0]), dict(first[1])) is not None
    now = time.time()

    def due(when: float | datetime) -> tuple[int, int]:
        """The due time (ms, rounded up) and the ``eta`` (exact us) of a call."""
        if isinstance(when, datetime):
            return eta_ms(when), datetime_us(when)
        seconds = float(when)
        return countdown_ms(seconds, now), round((now + seconds) * 1_000_000)

    try:
        inst.grants.ensure()
        levels = repr_levels(app)
        if keyed and key_for is not None:
            return _schedule_keyed(inst.store, template, key_for, _chain(first, iterator), due, levels)
        build = _fast_builder(template, levels) or generic_builder(template, levels)
        ids: list[str] = []

        def entries() -> Iterator[tuple[str, int, bytes]]:
            new_ids = _uuid4s()
            for args, kwargs, when in _chain(first, iterator):
                task_id = next(new_ids)
                due_ms, eta_us = due(when)
                payload = build(task_id, args, kwargs, eta_us)
                ids.append(task_id)
                yield task_id, due_ms, payload

        inst.store.add_many(entries())
        return ids
    except redis.RedisError as exc:
        denied = inst.grants.refused(exc, f"schedule_many of {task.name!r} stopped (the calls before it are stored)")
        if denied is not None:
            raise denied from exc
        raise StoreUnavailable(
            f"schedule_many of {task.name!r} stopped: the zset store at "
            f"{mask_url(str(inst.settings.url))} failed ({exc}); the calls before it are stored"
        ) from exc


def _schedule_keyed(store: Store, template: StoredMessage, key_for: Callable[..., str | None],
                    calls: Iterable[Call], due: When, maxlevels: int) -> list[str]:
    """Calls with idempotency keys: each message carries its own key, and the store keeps one
    pending entry per key (pipelined chunks, the slower path)."""
    build = generic_builder(template, maxlevels)
    ids: list[str] = []
    chunk: list[NewEntry] = []
    new_ids = _uuid4s()
    for args, kwargs, when in calls:
        task_id, key = next(new_ids), key_for(tuple(args), dict(kwargs))
        due_ms, eta_us = due(when)
        payload = build(task_id, args, kwargs, eta_us, {IDEMPOTENCY_KEY: key} if key is not None else None)
        chunk.append(NewEntry(task_id, due_ms, payload, key))
        if len(chunk) >= KEYED_CHUNK:
            ids += [r.task_id for r in store.schedule_many(chunk)]
            chunk = []
    if chunk:
        ids += [r.task_id for r in store.schedule_many(chunk)]
    return ids


def _per_call(template: StoredMessage) -> StoredMessage:
    """The template without the first call's idempotency key (each call has its own, or none) and
    with an ``eta`` (a placeholder: each call has its own)."""
    headers = {k: v for k, v in template.headers.items() if k != IDEMPOTENCY_KEY}
    return replace(template, headers={**headers, "eta": us_isoformat(0)})


def _fast_builder(template: StoredMessage, maxlevels: int = REPR_LEVELS) -> Builder | None:
    """The template encoder, when bodies are Kombu's JSON of ``[args, kwargs, <empty embed>]``."""
    codec = json_codec(registry.type_to_name.get(template.content_type))
    if codec is None or codec[2] is not kombu_json.dumps or template.headers.get("compression"):
        return None
    if not template.body.endswith(EMBED_SUFFIX):  # callbacks, chains...: not the common shape
        return None
    try:
        tmpl = Template(template)
    except ValueError:  # a template shaped unlike Celery's (no argsrepr, other id): the generic path
        return None
    encoder = kombu_json.JSONEncoder()  # what kombu's dumps builds on every call
    name = template.task_name

    def build(task_id: str, args: Sequence[Any], kwargs: dict[str, Any], eta_us: int) -> bytes:
        args = args if type(args) is tuple else tuple(args)
        kwargs = kwargs if type(kwargs) is dict else dict(kwargs)
        try:
            text = encoder.encode((args, kwargs))
        except (TypeError, ValueError) as exc:
            raise _not_serializable(name, exc) from exc
        # "[args, kwargs]" minus its "]" is the body before the embed suffix.
        return tmpl.encode(_repr(args, maxlevels), _repr(kwargs, maxlevels), text[:-1].encode("utf-8"), eta_us)

    return build


def generic_builder(template: StoredMessage, maxlevels: int = REPR_LEVELS) -> Callable[..., bytes]:
    """``build(task_id, args, kwargs, eta_us=None, extra=None) -> bytes``: the template with these
    values, serialized and compressed as the template was (any serializer; periodic templates use it
    too). ``eta_us`` None keeps the template's own ``eta`` (a periodic occurrence has none)."""
    compression = template.headers.get("compression")
    body = decompress(template.body, compression) if compression else template.body
    embed = loads(body, template.content_type, template.content_encoding, accept=[template.content_type])[2]
    serializer = registry.type_to_name[template.content_type]
    own_root = template.headers.get("root_id") == template.task_id

    def build(task_id: str, args: Sequence[Any], kwargs: dict[str, Any], eta_us: int | None = None,
              extra: dict[str, Any] | None = None) -> bytes:
        try:
            _, _, body = dumps((list(args), dict(kwargs), embed), serializer=serializer)
        except Exception as exc:
            raise _not_serializable(template.task_name, exc) from exc
        if isinstance(body, str):
            body = body.encode("utf-8")
        if compression:
            body, _ = compress(body, compression)
        eta = template.headers.get("eta") if eta_us is None else us_isoformat(eta_us)
        headers = {**template.headers, "id": task_id, "argsrepr": _repr(tuple(args), maxlevels),
                   "kwargsrepr": _repr(kwargs, maxlevels),
                   "eta": eta, **(extra or {})}
        if own_root:
            headers["root_id"] = task_id
        message = replace(template, task_id=task_id, body=body, headers=headers,
                          properties={**template.properties, "correlation_id": task_id})
        return encode(message)

    return build


def _not_serializable(name: str, exc: BaseException) -> TaskNotSerializable:
    return TaskNotSerializable(
        f"task {name!r} cannot be stored: its arguments are not serializable ({exc}); pass plain "
        "values (str, int, float, bool, None, list, dict) or ids instead of objects"
    )


def _template(task: Any, first: Call, options: dict[str, Any]) -> StoredMessage:
    """The stored form of the first call, built by Celery's own ``apply_async``."""
    built: list[StoredMessage] = []
    args, kwargs, _ = first
    task.apply_async(args=args, kwargs=kwargs, **options, **{TEMPLATE_OPTION: built.append})
    if not built:  # e.g. task_always_eager: apply_async ran the task instead of sending it
        raise RuntimeError(f"schedule_many: {task.name!r} was not sent (is task_always_eager on?)")
    return built[0]


def _uuid4s() -> Iterator[str]:
    """Random (version 4) UUIDs as Celery writes them, ~3x cheaper than ``str(uuid.uuid4())``:
    one ``os.urandom`` per block, then only slicing (the version and variant digits are set)."""
    variant = "89ab89ab89ab89ab"
    while True:
        block = os.urandom(16 * _ID_BLOCK).hex()
        for at in range(0, 32 * _ID_BLOCK, 32):
            h = block[at:at + 32]
            yield f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant[int(h[16], 16)]}{h[17:20]}-{h[20:]}"


def _chain(first: Call, rest: Iterable[Call]) -> Iterable[Call]:
    yield first
    yield from rest


def _repr(value: Any, maxlevels: int) -> str:
    """Celery's own ``argsrepr``/``kwargsrepr`` of a call (``saferepr``, not ``repr``: they differ
    for strings holding quotes or newlines), so a stored call is what ``apply_async`` stores."""
    return argsrepr(value, REPR_MAX, maxlevels)


__all__ = ["schedule_many"]
