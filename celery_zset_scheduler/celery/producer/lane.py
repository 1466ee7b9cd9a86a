"""The lane: a timed ``apply_async`` the store takes, stored without Celery's ``send_task`` machinery.

For such a call, Celery's ``send_task`` (routing, ``as_task_v2``'s headers, its configuration
lookups) and our sender (serializing, the stored form, encoding) cost about as much as the store's
round trip. Given the task, the options and a few settings, everything in the stored entry but the
task id, the arguments, the ``eta`` and the parent's ids is the same from call to call. So the
first call of each shape (task name and ``apply_async`` options, per thread) goes the full way,
and the sender hands its stored form back (``zset_capture``); it becomes the shape's template
(:class:`~...model.template.Template`; :func:`~...model.codec.encode` of the template with the call's
values where the Template cannot be used: a call from inside a task, an ``eta`` not in UTC). A
shape is taken only if the lane's entry for that first call is byte for byte the one Celery's
path stored. The next calls of the shape do what ``send_task`` and the sender do, in the same
order: ``backend.on_task_call``, the store write under the publish retry policy,
``after_task_publish``, the returned ``AsyncResult`` and the parent's trail.

Anything else goes the full way (:mod:`.lane_rules`): options outside a known set (``link``, ``link_error``,
``expires``, ``headers``, a shadow name, canvas options, ``Queue``/``Exchange`` objects, retries,
an idempotency key...), a serializer other than Kombu's JSON or a compression, ``send_task`` by
name, classes of Celery's that the app overrides (``send_task``, ``as_task_v2``, the task sender,
``now``), ``task_routes`` other than mappings, a ``before_task_publish`` receiver (it may change
the message) or a ``task_sent`` one, ``task_send_sent_event``, ``task_inherit_parent_priority``
inside a task, a result backend that uses the producer, arguments that are not a list/tuple and a
dict, or that JSON cannot encode (Celery's path then raises its own error). The settings Celery
and the sender read on every call are read on every call here too: a change applies at once.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery, signals
from celery.app.routes import MapRoute
from celery.utils import uuid
from celery.utils.nodenames import anon_nodename
from kombu.utils import json as kombu_json

from ...model import headers as names
from ...model.codec import EMBED_SUFFIX, JSON, UTF8, StoredMessage, encode
from ...model.internals import usable
from ...model.template import Template
from ...model.times import eta_ms, isoformat_us
from ...store.schedule import ScheduleResult
from ..core.compat import LANE, json_codec, levels_of, library_errors, verify_seconds
from ..core.messages import Built
from ..core.state import Installation
from .lane_rules import Send, app_is_plain, may_be_shape
from .reprs import argsrepr as saferepr
from .sender import write

#: The settings the full path reads on every call (Celery's ``send_task``, ``as_task_v2`` and the
#: router; the sender): a shape is used only while they keep the values it was made with.
SETTINGS = ("task_send_sent_event", "task_default_queue", "task_repr_maxlevels", "task_serializer",
            "task_compression", "task_default_delivery_mode", "task_publish_retry",
            "task_publish_retry_policy", "task_inherit_parent_priority")
_MAX_SHAPES = 256  # per thread; more (options that vary call to call) and the cache starts over
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_encoder = kombu_json.JSONEncoder()  # what Kombu's json.dumps makes on every call
_UTC = ZoneInfo("UTC")  # Celery's app.timezone with the default settings
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)



@dataclass(frozen=True)
class Shape:
    """What every call of one shape shares, and what its stored entries are made from."""

    message: StoredMessage  # the first call's, without its parent's ids and its body
    template: Template | None
    types: tuple[type, ...]  # of the option values: 1, 1.0 and True are different shapes
    zeros: tuple[tuple[str, float], ...]  # float options equal to zero and their sign: -0.0 is not 0.0
    settings: tuple[Any, ...]
    installed: Any  # the installation's settings object (a reset makes new ones)
    router: Any  # the app's router (Celery makes a new one when task_routes is updated)
    origin: str
    reply_to: str
    exchange: Any
    routing_key: str | None
    retry: bool
    policy: dict[str, Any]
    ignore_result: Any
    result_cls: Any
    add_to_parent: bool
    maxsize: tuple[int, int]  # argsrepr and kwargsrepr


@dataclass(frozen=True)
class Full:
    """A shape that goes the full way (cached too, so that deciding it costs little next time):
    while the settings are these, or for good (None)."""

    settings: tuple[Any, ...] | None


FULL = Full(None)


class Lane:
    """One app's lane; shapes are kept per thread (``reply_to`` is Celery's per-thread id)."""

    def __init__(self, app: Celery, inst: Installation, original: Send) -> None:
        self.app = app
        self.inst = inst
        self.original = original
        self.usable = usable(LANE) and app_is_plain(app, original)
        self._settings_keys: list[tuple[str, ...]] | None = None
        self.taken = 0  # calls stored by the lane (not exact under threads: for tests and curiosity)

    def due(self, countdown: Any, eta: Any, header_of: Callable[[Any, Any], str]) -> tuple[str, int, int | None]:
        """The ``eta`` header of a timed call, its due time (epoch ms, rounded up, as the sender
        computes it) and, when known here, its epoch microseconds. A countdown of a UTC app is
        computed as ``as_task_v2`` computes it (``app.now()`` plus the countdown, in UTC) without
        its time zone machinery; anything else by ``header_of(countdown, eta)``."""
        if self.usable and countdown and type(countdown) in (int, float) and self.app.timezone is _UTC:
            verify_seconds(countdown, "countdown")
            when = datetime.now(timezone.utc) + timedelta(seconds=countdown)
            return when.isoformat(), math.ceil(when.timestamp() * 1000), (when - _EPOCH) // _US
        header = header_of(countdown, eta)
        return header, eta_ms(header), None

    def send(self, name: str, args: Any, kwargs: Any, header: str, due_ms: int, eta_us: int | None,
             options: dict[str, Any]) -> Any:
        """``send_task(name, args, kwargs, **options)`` for a call the store takes (``options``
        carry ``zset_due`` and the producer)."""
        if not self.usable:
            return self.original(name, args, kwargs, None, None, **options)
        opts = dict(options)
        task_id = opts.pop("task_id", None)
        producer = opts.pop("producer", None)
        del opts[names.DUE_OPTION]
        try:
            key = (name, *opts.items())
            shapes = self._shapes()
            shape = shapes.get(key)
        except TypeError:  # an unhashable option value: not a shape
            return self.original(name, args, kwargs, None, None, **options)
        if shape is None:
            return self._first(shapes, key, name, args, kwargs, options, opts)
        if type(shape) is Full:
            if shape.settings is not None and shape.settings != self._read_settings():
                return self._first(shapes, key, name, args, kwargs, options, opts)
            return self.original(name, args, kwargs, None, None, **options)
        assert isinstance(shape, Shape)
        if not self._current(shape):  # a setting changed, or another thread id or process: learn it again
            return self._first(shapes, key, name, args, kwargs, options, opts)
        taken = self._take(shape, name, args, kwargs, header, due_ms, eta_us, opts, task_id, producer)
        if taken is _NOT_TAKEN:
            return self.original(name, args, kwargs, None, None, **options)
        return taken

    # -- a call of a known shape -----------------------------------------------------------------

    def _take(self, shape: Shape, name: str, args: Any, kwargs: Any, header: str, due_ms: int,
              eta_us: int | None, opts: dict[str, Any], task_id: Any, producer: Any) -> Any:
        app = self.app
        if (producer is None or signals.before_task_publish.receivers or signals.task_sent.receivers
                or tuple(map(type, opts.values())) != shape.types):
            return _NOT_TAKEN
        if shape.zeros and any(math.copysign(1.0, opts[k]) != sign for k, sign in shape.zeros):
            return _NOT_TAKEN
        parent = app.current_worker_task
        if parent is not None and shape.settings[-1]:  # task_inherit_parent_priority
            return _NOT_TAKEN
        task_id = task_id or uuid()
        if type(task_id) is not str:
            return _NOT_TAKEN
        parent_ids = _parent_ids(parent)
        try:
            payload = self.payload(shape, task_id, args, kwargs, header, eta_us, parent_ids)
        except Exception:  # e.g. not JSON-serializable: Celery's path raises its own error
            return _NOT_TAKEN
        if payload is None:
            return _NOT_TAKEN
        inst = self.inst
        ignore_result = shape.ignore_result
        with library_errors(producer.connection):
            if not ignore_result:
                app.backend.on_task_call(producer, task_id)

            def schedule() -> ScheduleResult:
                return inst.store.schedule(task_id, due_ms, payload)

            result = write(app, inst, name, schedule, shape.retry, shape.policy)
            if result.created and signals.after_task_publish.receivers:
                signals.after_task_publish.send(
                    sender=name, body=(args or (), kwargs or {}, dict(_EMBED)),
                    headers=_headers(shape, task_id, args, kwargs, header, parent_ids),
                    exchange=shape.exchange, routing_key=shape.routing_key,
                )
        async_result = (shape.result_cls or app.AsyncResult)(task_id)
        async_result.ignored = ignore_result
        if shape.add_to_parent and parent is not None:
            parent.add_trail(async_result)
        self.taken += 1
        return async_result

    def _current(self, shape: Shape) -> bool:
        """Whether what the shape was made under still holds: settings, router, thread id, process."""
        return (shape.installed is self.inst.settings and shape.router is self.app.amqp.router
                and shape.reply_to == self.app.thread_oid
                and shape.origin == anon_nodename() and shape.settings == self._read_settings())

    def payload(self, shape: Shape, task_id: str, args: Any, kwargs: Any, header: str, eta_us: int | None,
                parent_ids: tuple[str, str] | None) -> bytes | None:
        """The stored entry of this call, as the full path encodes it (None: not a lane call)."""
        args = args or ()
        kwargs = kwargs or {}
        if type(args) not in (tuple, list) or type(kwargs) is not dict:
            return None
        maxlevels = levels_of(shape.settings[2])
        argsrepr = saferepr(args, shape.maxsize[0], maxlevels=maxlevels)
        kwargsrepr = saferepr(kwargs, shape.maxsize[1], maxlevels=maxlevels)
        # Kombu's JSON of (args, kwargs, embed): "[args, kwargs" and the empty embed's suffix.
        body = _encoder.encode((args, kwargs))[:-1].encode(UTF8)
        if eta_us is None:
            eta_us = isoformat_us(header)
        if shape.template is not None and parent_ids is None and eta_us is not None:
            return shape.template.encode(argsrepr, kwargsrepr, body, eta_us)
        stored = shape.message
        headers = {**stored.headers, "id": task_id, "root_id": task_id, "argsrepr": argsrepr,
                   "kwargsrepr": kwargsrepr, "eta": header}
        if parent_ids is not None:
            headers["root_id"], headers["parent_id"] = parent_ids
        return encode(replace(stored, task_id=task_id, body=body + EMBED_SUFFIX, headers=headers,
                              properties={**stored.properties, "correlation_id": task_id}))

    # -- the first call of a shape ---------------------------------------------------------------

    def _first(self, shapes: dict[Any, Any], key: Any, name: str, args: Any, kwargs: Any,
               options: dict[str, Any], opts: dict[str, Any]) -> Any:
        """The full path, keeping its stored form as the shape's template when it can be one."""
        if signals.before_task_publish.receivers:  # they may change the message: not a template
            return self.original(name, args, kwargs, None, None, **options)
        if not may_be_shape(opts):  # not kept: such options (a retry's) often differ on every call
            return self.original(name, args, kwargs, None, None, **options)
        settings = self._read_settings()
        if settings != tuple(self.app.conf.get(setting) for setting in SETTINGS):  # one it cannot read
            self._keep(shapes, key, FULL)
            return self.original(name, args, kwargs, None, None, **options)
        # A copy: a setting changed in place (the retry policy's dict) must not still equal it.
        try:
            settings = copy.deepcopy(settings)
        except Exception:  # a value that cannot be copied: such calls go the full way
            self._keep(shapes, key, FULL)
            return self.original(name, args, kwargs, None, None, **options)
        installed = self.inst.settings
        parent = self.app.current_worker_task
        captured: list[tuple[Built, bytes]] = []
        result = self.original(name, args, kwargs, None, None, **options,
                               **{names.CAPTURE_OPTION: lambda built, raw: captured.append((built, raw))})
        shape = None
        if captured and not (parent is not None and settings[-1]):
            built, raw = captured[0]
            shape = self._shape(built, opts, settings, installed)
            if shape is not None and self._check(shape, built.message, args, kwargs, raw) is False:
                shape = None
        self._keep(shapes, key, shape or Full(settings))
        return result

    @staticmethod
    def _keep(shapes: dict[Any, Any], key: Any, shape: Any) -> None:
        if len(shapes) >= _MAX_SHAPES and key not in shapes:
            shapes.clear()
        shapes[key] = shape

    def _shape(self, built: Built, opts: dict[str, Any], settings: tuple[Any, ...], installed: Any) -> Shape | None:
        stored = built.message
        headers = stored.headers
        serializer = json_codec(opts.get("serializer") or settings[3])  # what Kombu's dumps used
        router = self.app.amqp.router
        if (settings[0] or not all(type(route) is MapRoute for route in router.routes)
                or stored.content_type != JSON or stored.content_encoding != UTF8
                or headers.get("compression") or not stored.body.endswith(EMBED_SUFFIX)
                or serializer is None or serializer[2] is not kombu_json.dumps):
            return None
        task_id = stored.task_id
        if headers.get("id") != task_id or stored.properties.get("correlation_id") != task_id:
            return None
        headers = copy.deepcopy(headers)  # the after_task_publish receivers get the original
        headers["root_id"], headers["parent_id"] = task_id, None
        # Not the first call's body: each call brings its own, and a large one would stay with the cache.
        message = replace(stored, headers=headers, properties=dict(stored.properties), body=EMBED_SUFFIX)
        try:
            template: Template | None = Template(message)
        except ValueError:
            template = None
        amqp = self.app.amqp
        return Shape(
            message=message, template=template, types=tuple(map(type, opts.values())),
            zeros=tuple((k, math.copysign(1.0, v)) for k, v in opts.items() if type(v) is float and v == 0.0),
            settings=settings,
            installed=installed, router=router, origin=str(headers.get("origin")),
            reply_to=str(message.properties.get("reply_to")),
            exchange=built.exchange, routing_key=built.routing_key,
            retry=bool(settings[6] if opts.get("retry") is None else opts["retry"]),
            policy=dict(built.retry_policy), ignore_result=opts.get("ignore_result"),
            result_cls=opts.get("result_cls"), add_to_parent=bool(opts.get("add_to_parent", True)),
            maxsize=(amqp.argsrepr_maxsize, amqp.kwargsrepr_maxsize),
        )

    def _check(self, shape: Shape, stored: StoredMessage, args: Any, kwargs: Any, raw: bytes) -> bool:
        """Whether the lane makes, for the first call, the entry the full path stored."""
        headers = stored.headers
        parent_id, root_id = headers.get("parent_id"), headers.get("root_id")
        parent_ids = None if parent_id is None and root_id == stored.task_id else (str(root_id), str(parent_id))
        try:
            made = self.payload(shape, stored.task_id, args, kwargs, str(headers.get("eta")), None, parent_ids)
        except (TypeError, ValueError):
            return False
        return made == raw

    # -- per-thread state and settings -----------------------------------------------------------

    def _shapes(self) -> dict[Any, Any]:
        local = self.inst.per_thread
        shapes: dict[Any, Any] | None = getattr(local, "lane_shapes", None)
        if shapes is None or getattr(local, "lane_pid", None) != os.getpid():
            shapes = local.lane_shapes = {}
            local.lane_pid = os.getpid()
        return shapes

    def _read_settings(self) -> tuple[Any, ...]:
        """:data:`SETTINGS` as ``conf.get`` reads them (the maps in order; a prefixed or old-style
        name too), without its per-lookup overhead."""
        conf = self.app.conf
        keys = self._settings_keys
        if keys is None:
            keys = self._settings_keys = [tuple(conf._to_keys(name)) for name in SETTINGS]
        out = []
        for names_of in keys:
            for mapping in conf.maps:
                for k in names_of:
                    if k in mapping:
                        out.append(mapping[k])
                        break
                else:
                    continue
                break
            else:
                out.append(None)
        return tuple(out)


_NOT_TAKEN = object()


def _parent_ids(parent: Any) -> tuple[str, str] | None:
    """``(root_id, parent_id)`` Celery's ``send_task`` takes from the task being executed."""
    if parent is None:
        return None
    request = parent.request
    return request.root_id or request.id, request.id


def _headers(shape: Shape, task_id: str, args: Any, kwargs: Any, header: str,
             parent_ids: tuple[str, str] | None) -> dict[str, Any]:
    """The headers dict the full path gives ``after_task_publish``."""
    headers = copy.deepcopy(shape.message.headers)
    root_id, parent_id = parent_ids if parent_ids is not None else (task_id, None)
    maxlevels = levels_of(shape.settings[2])
    headers.update(id=task_id, root_id=root_id, parent_id=parent_id, eta=header,
                   argsrepr=saferepr(args or (), shape.maxsize[0], maxlevels=maxlevels),
                   kwargsrepr=saferepr(kwargs or {}, shape.maxsize[1], maxlevels=maxlevels))
    return headers
