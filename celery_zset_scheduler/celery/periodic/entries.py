"""Making periodic entries with Celery: normalising them, their message template, ``beat_schedule``.

The message template
    Every occurrence of an entry is stored with the message Celery builds for
    ``task.apply_async(args, kwargs, queue=..., priority=..., headers=..., expires=..., **options)``
    (``app.send_task`` for a task this app does not know, as Celery beat does): routed, serialized
    and compressed exactly as Celery would, through the sender's ``zset_template`` path, which
    hands the stored form back without storing it. It is built once, when the entry is written,
    with a placeholder id whose ``root_id`` and ``correlation_id`` equal it, so its encoded form
    does not contain the id at all: the leader stores the same bytes under each occurrence's id
    (and sets ``expires`` for ``expire_seconds``). Entries written together share one Celery
    build per shape (:class:`Templates`). ``before_task_publish`` therefore fires when entries are
    written, not for each occurrence, and routing changes take effect when the entry is written
    again (the ``beat_schedule`` sync does so at every dispatcher start for its changed entries).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from celery.app.routes import MapRoute

from ...errors import ConfigurationError, ZSetSchedulerError
from ...model import headers as names
from ...model.codec import StoredMessage, decode, encode
from ...model.periodic import PeriodicEntry, PeriodicEntryError, iso_to_ms, ms_to_iso
from ...model.periodic_json import entry_to_json
from ..core.compat import repr_levels
from ..core.state import installation_for
from ..producer.bulk import generic_builder
from .schedules import spec_of, validate_entry, validate_spec, zone_name

#: The id the template is built with; never the id of a stored occurrence.
PLACEHOLDER_ID = "00000000-0000-4000-8000-000000000000"

#: Keys a ``beat_schedule`` entry may have: Celery's, plus the fields of a periodic entry.
CELERY_KEYS = ("task", "schedule", "args", "kwargs", "options", "relative")
EXTRA_KEYS = ("description", "enabled", "one_off", "start_time", "end_time", "catchup", "catchup_window",
              "overlap", "jitter")
#: ``options`` keys that are fields of their own.
OPTION_FIELDS = ("queue", "exchange", "routing_key", "priority", "headers")


def app_zone(app: Any) -> str:
    return zone_name(app.timezone)


def normalized(app: Any, entry: PeriodicEntry) -> PeriodicEntry:
    """A valid entry whose crontab carries its zone: ``timezone: null`` becomes the app's, so every
    dispatcher computes the same fire times whatever its own configuration."""
    spec = validate_spec(entry.schedule, entry.name)
    if spec["type"] == "crontab" and spec["timezone"] is None:
        spec = {**spec, "timezone": app_zone(app)}
    entry = replace(entry, schedule=spec)
    validate_entry(entry)
    return entry


def _celery_message(app: Any, entry: PeriodicEntry) -> StoredMessage:
    """The message Celery builds for ``entry`` (its template before encoding)."""
    if installation_for(app) is None:
        raise ConfigurationError("periodic entries need an installed app: call celery_zset_scheduler.install(app)")
    options: dict[str, Any] = dict(entry.options)
    for key in ("queue", "exchange", "routing_key", "priority"):
        value = getattr(entry, key)
        if value is not None:
            options[key] = value
    headers = {**entry.headers, names.CELERY_BEAT_TASK: True, names.PERIODIC: entry.name}
    if entry.overlap != "allow":
        headers[names.PERIODIC_OVERLAP] = entry.overlap
    if entry.expires is not None:
        options["expires"] = datetime.fromisoformat(ms_to_iso(iso_to_ms(entry.expires)))
    built: list[StoredMessage] = []
    send: dict[str, Any] = {"task_id": PLACEHOLDER_ID, "headers": headers, **options,
                            names.TEMPLATE_OPTION: built.append}
    task = app.tasks.get(entry.task)
    try:
        if task is not None and not app.conf.task_always_eager:
            task.apply_async(tuple(entry.args), dict(entry.kwargs), **send)
        else:  # eager apply_async would run the body here and now
            app.send_task(entry.task, tuple(entry.args), dict(entry.kwargs), **send)
    except (TypeError, ValueError, KeyError) as exc:
        raise PeriodicEntryError(f"Celery cannot build its message: {exc}", None, entry.name) from None
    if len(built) != 1:
        raise ConfigurationError(f"periodic entry {entry.name!r}: the app's sender did not build a message "
                                 "(is celery_zset_scheduler.install(app) in effect?)")
    message = built[0]
    # No trace of the id, nor of a task that happened to be running: each occurrence is a root task.
    return replace(message, headers={**message.headers, "id": message.task_id, "root_id": message.task_id,
                                     "parent_id": None},
                   properties={**message.properties, "correlation_id": message.task_id})


class Templates:
    """Builds the templates of many entries: Celery builds one message per *shape* (task, routing,
    headers, options, expiry, overlap), and each entry of that shape gets it with its own
    arguments, their reprs and its name header, serialized with the message's own serializer and
    compression, as bulk scheduling does (100,000 entries in seconds, not minutes). A routing
    function in ``task_routes`` may route by the arguments, so with one every entry is built by
    Celery itself."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._builders: dict[str, Callable[..., bytes]] = {}
        routes = getattr(app.amqp.router, "routes", ())
        self._shared = all(isinstance(route, MapRoute) for route in routes)

    def build(self, entry: PeriodicEntry) -> bytes:
        if not self._shared:
            return encode(_celery_message(self.app, entry))
        shape = json.dumps([entry.task, entry.queue, entry.exchange, entry.routing_key, entry.priority,
                            entry.headers, entry.options, entry.expires, entry.overlap], sort_keys=True, default=str)
        builder = self._builders.get(shape)
        if builder is None:
            builder = self._builders[shape] = generic_builder(_celery_message(self.app, entry),
                                                               repr_levels(self.app))
        try:
            return builder(PLACEHOLDER_ID, entry.args, entry.kwargs, extra={names.PERIODIC: entry.name})
        except ZSetSchedulerError as exc:
            raise PeriodicEntryError(str(exc), "args", entry.name) from None


def build_template(app: Any, entry: PeriodicEntry) -> bytes:
    """The encoded message every occurrence of ``entry`` is stored with (see the module docs)."""
    return Templates(app).build(entry)


def fingerprint(entry: PeriodicEntry, template: bytes) -> str:
    """What a ``beat_schedule`` sync compares: the definition and the message, without what differs
    from one process to the next (the sender's node name and reply queue)."""
    message = decode(PLACEHOLDER_ID, template)
    stable = replace(message, headers={**message.headers, "origin": None},
                     properties={k: v for k, v in message.properties.items() if k != "reply_to"})
    digest = hashlib.sha256(entry_to_json(entry).encode() + b"\n" + encode(stable))
    return digest.hexdigest()[:24]


def _iso_field(value: Any, key: str, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise PeriodicEntryError("must be an aware datetime (naive ones are ambiguous across hosts)", key, name)
        return ms_to_iso(iso_to_ms(value.isoformat()))
    raise PeriodicEntryError(f"must be an aware datetime or ISO 8601 string, not {value!r}", key, name)


def from_beat_schedule(app: Any, name: str, item: Mapping[str, Any]) -> PeriodicEntry:
    """The periodic entry of one ``beat_schedule`` item (Celery's keys plus :data:`EXTRA_KEYS`)."""
    if not isinstance(item, Mapping):
        raise PeriodicEntryError(f"must be a dict, not {type(item).__name__}", None, name)
    unknown = sorted(set(item) - {*CELERY_KEYS, *EXTRA_KEYS})
    if unknown:
        raise PeriodicEntryError(f"unknown key {unknown[0]!r} in beat_schedule (known: "
                                 f"{', '.join((*CELERY_KEYS, *EXTRA_KEYS))})", unknown[0], name)
    for key in ("task", "schedule"):
        if key not in item:
            raise PeriodicEntryError("is missing", key, name)
    try:
        spec = spec_of(item["schedule"])
    except ConfigurationError as exc:
        raise PeriodicEntryError(str(exc), "schedule", name) from None
    if item.get("relative") and spec["type"] == "interval":
        spec = {**spec, "relative": True}
    options = dict(item.get("options") or {})
    fields: dict[str, Any] = {key: options.pop(key) for key in OPTION_FIELDS if key in options}
    expires = options.pop("expires", None)
    if isinstance(expires, timedelta):
        fields["expire_seconds"] = expires.total_seconds()
    elif isinstance(expires, (int, float)) and not isinstance(expires, bool):
        fields["expire_seconds"] = float(expires)
    elif expires is not None:
        fields["expires"] = _iso_field(expires, "expires", name)
    for key in ("start_time", "end_time"):
        if key in item:
            fields[key] = _iso_field(item[key], key, name)
    for key in ("description", "enabled", "one_off", "catchup", "catchup_window", "overlap", "jitter"):
        if key in item:
            fields[key] = item[key]
    if fields.get("headers") is None:
        fields.pop("headers", None)
    args, kwargs = item.get("args") or (), item.get("kwargs") or {}
    entry = PeriodicEntry(name=name, task=item["task"], schedule=spec,
                          args=list(args) if isinstance(args, (list, tuple)) else args, kwargs=dict(kwargs),
                          options=options, **fields)
    return normalized(app, entry)


def default_entries(app: Any) -> dict[str, dict[str, Any]]:
    """The entries Celery beat installs by itself (``Scheduler.install_default_entries``)."""
    from celery.schedules import crontab

    if app.conf.result_expires and not app.backend.supports_autoexpire:
        return {"celery.backend_cleanup": {"task": "celery.backend_cleanup", "schedule": crontab("0", "4", "*"),
                                           "options": {"expires": 12 * 3600}}}
    return {}


def config_entries(app: Any) -> list[PeriodicEntry]:
    """Every entry of ``beat_schedule`` (and Celery's defaults), validated: a bad one raises."""
    schedule = app.conf.beat_schedule or {}
    if not isinstance(schedule, Mapping):
        raise ConfigurationError(f"beat_schedule must be a dict, not {type(schedule).__name__}")
    items = {**default_entries(app), **schedule}
    return [from_beat_schedule(app, str(name), item) for name, item in items.items()]
