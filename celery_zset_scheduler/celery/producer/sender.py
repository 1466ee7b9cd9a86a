"""The store path of ``send_task_message``: a timed task is serialized and stored, not published.

Celery's ``send_task_message`` (``celery.app.amqp``) is wrapped per app. A message whose ``eta``
is at least ``zset_scheduler_min_countdown`` away is routed exactly as Celery would route it,
serialized with the task's serializer and compression (:mod:`..core.messages`), and stored with its due
time. Everything else goes to the original sender untouched. ``before_task_publish`` and
``after_task_publish`` fire as they do for a published task, so stamping and tracing hooks see the
same message.

Options reach the sender from the caller explicitly: ``zset_template`` (a callable that gets
the stored form instead of the store: bulk scheduling builds one message the normal way and uses
it as a template), ``zset_outcome`` (a list the store's answer is appended to) and ``zset_due``
(the ``eta`` header of a timed send that the ``send_task`` wrapper, :mod:`.timed`, sent to Celery
as an untimed one: it is written into the message, which is then stored).

The store write follows Celery's publish retry options as a broker publish does: ``retry``
(default ``task_publish_retry``) and ``retry_policy`` merged over ``task_publish_retry_policy``;
when the store stays unreachable it raises :class:`~..errors.StoreUnavailable`.

Every retry (a message with ``retries`` > 0 for the task being executed) carries the time of
the task's first failure, for its dead-letter record, whatever the task's class.

Task protocol 1 (``task_protocol=1``) keeps the ETA in the body, which the store does not read:
a timed send with it is refused with :class:`~..errors.ConfigurationError` rather than sent to the
broker to wait in worker memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import redis
from celery import signals
from kombu.utils.functional import retry_over_time

from ...errors import ConfigurationError, StoreUnavailable
from ...model import headers as names
from ...model.codec import StoredMessage, encode
from ...model.times import eta_ms
from ...model.urls import mask_url
from ...store.schedule import ScheduleResult
from ..core.messages import Built, build
from ..core.state import Installation, installation_for

Template = Callable[[StoredMessage], None]


def wrap_sender(app: Any, original: Callable[..., Any]) -> Callable[..., Any]:
    """The app's ``send_task_message`` with the store path in front of it."""

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        inst = installation_for(app)
        headers = message[0]
        template: Template | None = options.pop(names.TEMPLATE_OPTION, None)
        due: str | None = options.pop(names.DUE_OPTION, None)
        if inst is None:
            return original(producer, name, message, **_without_ours(options))
        if not _is_protocol_2(message):
            return _protocol_1(app, inst, original, producer, name, message, template, options)
        if due is not None:  # the send_task wrapper already decided: the store takes it
            _write_eta(message, due)
        if headers.get("retries"):
            _carry_first_failure(app, headers)
        if template is not None:
            return template(build_only(app, inst, name, message, **options))
        eta = headers.get("eta")
        if not eta:
            return original(producer, name, message, **_without_ours(options))
        due_ms = eta_to_ms(app, eta)
        if due is None and not stores(inst, headers.get("retries"), due_ms):
            return original(producer, name, message, **_without_ours(options))
        return store_message(app, inst, name, message, due_ms, **options)

    send_task_message.__wrapped__ = original  # type: ignore[attr-defined]
    return send_task_message


def _without_ours(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k not in names.OPTIONS}


def stores(inst: Installation, retries: Any, due_ms: int) -> bool:
    """Whether the store takes a send due at ``due_ms``: retries always wait in the store; only
    first sends honour min_countdown."""
    if retries:
        return True
    return due_ms - time.time() * 1000 >= inst.settings.min_countdown * 1000


def _write_eta(message: Any, eta: str) -> None:
    """The ``eta`` Celery would have written into the headers and the task-sent event."""
    message[0]["eta"] = eta
    sent_event = message[3]
    if isinstance(sent_event, dict):
        sent_event["eta"] = eta


def _is_protocol_2(message: Any) -> bool:
    headers = message[0]
    return isinstance(headers, dict) and "task" in headers


def _protocol_1(app: Any, inst: Installation, original: Callable[..., Any], producer: Any, name: str,
                message: Any, template: Template | None, options: dict[str, Any]) -> Any:
    """Protocol 1 keeps ``eta`` and ``retries`` in the body: untimed sends go to the broker as
    usual; a send the store would take is refused instead of waiting in worker memory."""
    body = message[2]
    eta = body.get("eta") if isinstance(body, dict) else None
    if template is None and (not eta or not stores(inst, body.get("retries"), eta_to_ms(app, eta))):
        return original(producer, name, message, **_without_ours(options))
    raise ConfigurationError(
        f"cannot store task {name!r}: celery-zset-scheduler needs Celery's task protocol 2 (the "
        f"default) and this app sets task_protocol={app.conf.task_protocol}; with protocol 1 the "
        "task would wait in worker memory instead. Remove task_protocol from the configuration."
    )


def _carry_first_failure(app: Any, headers: dict[str, Any]) -> None:
    """A retry of the task being executed carries its first failure's time (dead letters show it)."""
    if headers.get(names.FIRST_FAILURE):
        return
    current = app.current_worker_task
    request = getattr(current, "request", None)
    first = None
    if request is not None and getattr(request, "id", None) == headers.get("id"):
        first = getattr(request, names.FIRST_FAILURE, None)
    headers[names.FIRST_FAILURE] = int(first or time.time() * 1000)


def eta_to_ms(app: Any, eta: str | datetime) -> int:
    """Epoch milliseconds of an ETA header; naive times are UTC, as the worker reads them."""
    return eta_ms(eta)


def build_only(app: Any, inst: Installation, name: str, message: Any, **options: Any) -> StoredMessage:
    """The stored form of a message, without storing it (``before_task_publish`` fires)."""
    return _build(app, inst, name, message, options).message


def _build(app: Any, inst: Installation, name: str, message: Any, options: dict[str, Any]) -> Built:
    body = message[2]

    def before(exchange: Any, routing_key: Any, declare: Any, headers: Any, properties: Any,
               policy: dict[str, Any]) -> None:
        signals.before_task_publish.send(
            sender=name, body=body, exchange=exchange, routing_key=routing_key, declare=declare,
            headers=headers, properties=properties, retry_policy=policy,
        )

    return build(app, inst.settings, name, message, before_serialize=before, **_build_options(options))


def _build_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options :func:`.messages.build` takes; the rest are message properties."""
    taken = ("exchange", "routing_key", "queue", "serializer", "delivery_mode", "compression", "declare",
             "headers", "exchange_type", "retry_policy")
    ignored = ("event_dispatcher", "retry", "timeout", "confirm_timeout", *names.OPTIONS)
    out = {k: options[k] for k in taken if k in options}
    out["properties"] = {k: v for k, v in options.items() if k not in taken and k not in ignored}
    return out


def store_message(app: Any, inst: Installation, name: str, message: Any, due_ms: int,
                  **options: Any) -> ScheduleResult:
    """Route, serialize and store one task message; fires the publish signals and events."""
    idempotency_key = options.get(names.IDEMPOTENCY_KEY_OPTION)
    replace = bool(options.get(names.REPLACE_OPTION, False))
    outcome: list[ScheduleResult] | None = options.get(names.OUTCOME_OPTION)
    capture: Callable[[Built, bytes], None] | None = options.get(names.CAPTURE_OPTION)
    body, sent_event = message[2], message[3]
    built = _build(app, inst, name, message, options)
    stored = built.message
    payload = encode(stored)
    if capture is not None:
        capture(built, payload)

    def schedule() -> ScheduleResult:
        return inst.store.schedule(stored.task_id, due_ms, payload, idempotency_key=idempotency_key, replace=replace)

    retry = options.get("retry")
    result = write(app, inst, name, schedule, app.conf.task_publish_retry if retry is None else retry,
                   built.retry_policy)
    if outcome is not None:
        outcome.append(result)
    if not result.created:  # already pending (same id or key): nothing was sent
        return result
    signals.after_task_publish.send(
        sender=name, body=body, headers=message[0], exchange=built.exchange, routing_key=built.routing_key,
    )
    if sent_event:
        evd = options.get("event_dispatcher") or _sent_events(inst)
        sent_event.update({"queue": built.queue_name, "exchange": stored.exchange, "routing_key": built.routing_key})
        with app.producer_or_acquire() as producer:
            evd.publish("task-sent", sent_event, producer, retry=options.get("retry"),
                        retry_policy=built.retry_policy)
    return result


def _sent_events(inst: Installation) -> Any:
    """The app's dispatcher of ``task-sent`` events, made once as Celery makes its own: disabled,
    as ``publish`` is given the producer."""
    if inst.event_dispatcher is None:
        inst.event_dispatcher = inst.app.events.Dispatcher(enabled=False)
    return inst.event_dispatcher


def write(app: Any, inst: Installation, name: str, schedule: Callable[[], ScheduleResult], retry: Any,
          policy: dict[str, Any]) -> ScheduleResult:
    """``schedule()``, retried under ``policy`` when ``retry`` is true; a Redis error that stays
    is raised as :class:`~..errors.StoreUnavailable`, a refused permission as
    :class:`~..errors.PermissionRefused` (the user's permissions are asked before the first write)."""

    def checked() -> ScheduleResult:
        inst.grants.ensure()
        return schedule()

    try:
        if retry:
            return _with_policy(checked, policy)
        return checked()
    except redis.RedisError as exc:
        denied = inst.grants.refused(exc, f"cannot store task {name!r}")
        if denied is not None:
            raise denied from exc
        # Named as ours: inside send_task, Kombu would re-raise a Redis error as a broker error.
        raise StoreUnavailable(
            f"cannot store task {name!r} in the zset store at {mask_url(str(inst.settings.url))}: {exc}"
        ) from exc


# What may pass once Redis answers again; a refused command (NOSCRIPT, OOM, ...) is not retried.
_OUTAGES = (redis.ConnectionError, redis.TimeoutError)


def _with_policy(call: Callable[[], ScheduleResult], policy: dict[str, Any]) -> ScheduleResult:
    """``call``, retried on a Redis outage as Kombu retries a publish: ``max_retries`` (None:
    forever), sleeping ``interval_start``, then ``interval_step`` more each time up to
    ``interval_max``; then the last error is raised."""
    result: ScheduleResult = retry_over_time(
        call, _OUTAGES,
        max_retries=policy.get("max_retries", 3),
        interval_start=policy.get("interval_start", 0),
        interval_step=policy.get("interval_step", 0.2),
        interval_max=policy.get("interval_max", 0.2),
        timeout=policy.get("timeout"),
    )
    return result
