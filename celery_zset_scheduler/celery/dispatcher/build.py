"""Building the dispatcher of a Celery app (``beat -S zset`` and ``celery zset run`` run it).

Every dispatcher also runs the periodic entries of the shards it leads (the periodic step with
Celery's planner) and, before its first look, syncs ``beat_schedule`` into the store. A bad
``beat_schedule`` entry is refused here, at start, with the entry and field named.
"""

from __future__ import annotations

import logging
from typing import Any

from ...dispatch.config import DispatcherConfig
from ...dispatch.fastpath import fast
from ...dispatch.generic import generic
from ...dispatch.handoff import Publisher
from ...dispatch.loop import Dispatcher
from ...dispatch.observer import Observer, Observers
from ...dispatch.periodic import periodic_step
from ...dispatch.pipelined import pipelined
from ...errors import ConfigurationError
from ...model.internals import check_all, usable
from ...model.logs import log_event
from ..core.messages import MessageCheck
from ..core.state import ensure_installation
from ..periodic.config import preparer
from ..periodic.entries import config_entries
from ..periodic.planner import CeleryPlanner
from ..producer.revokes import mark_revoked
from ..publishers.amqp_confirms import ConfirmPublisher
from ..publishers.built_routes import BuiltRoutes
from ..publishers.fast_routes import FastRoutes
from ..publishers.kombu import KombuPublisher
from ..publishers.kombu_internals import KOMBU_REDIS


def build_dispatcher(
    app: Any, *, pinned: set[int] | None = None, member_id: str | None = None,
    observer: Observer | None = None, metrics_port: int | None = None, metrics_option: str = "metrics_port",
) -> Dispatcher:
    """A dispatcher for ``app``; with ``zset_scheduler_metrics_port`` set (or ``metrics_port``
    given) it also serves Prometheus metrics until it stops. ``metrics_option`` is how the caller
    names ``metrics_port`` in errors (``--metrics-port`` for the command line)."""
    inst = ensure_installation(app)
    s = inst.settings
    check_all()  # every publisher's internals are imported by now: any WARNING comes at start
    if pinned is not None:
        bad = sorted(x for x in pinned if not 0 <= x < s.shards)
        if bad:
            raise ConfigurationError(f"--shards {bad}: the store has shards 0..{s.shards - 1}")
    config = DispatcherConfig(
        batch_size=s.batch_size,
        batch_bytes=s.batch_bytes,
        lock_timeout=s.lock_timeout,
        max_interval=s.max_interval,
        inflight_timeout=s.inflight_timeout,
        heartbeat_interval=s.heartbeat_interval,
        claim_interval=s.claim_interval,
        collect_interval=s.collect_interval,
    )
    port = s.metrics_port if metrics_port is None else metrics_port
    metrics = None
    if port is not None:
        from ...dispatch.metrics import DispatcherMetrics

        metrics = DispatcherMetrics("zset_scheduler_metrics_port" if metrics_port is None else metrics_option)
        observer = metrics if observer is None else Observers(observer, metrics)
    planner = CeleryPlanner(app, s, preparer(app, config_entries(app)))
    check = MessageCheck(s.accept_content)
    publisher = publisher_for(app)

    def revoked(ids: list[str]) -> None:
        mark_revoked(app, ids)

    if isinstance(publisher, ConfirmPublisher):  # its confirms come in while the next batch is claimed
        handoff = pipelined(publisher, check=check, revoked=revoked)
    elif s.fast_path == "auto" and usable(KOMBU_REDIS):
        lane = (publisher, BuiltRoutes(app, check.allowed)) if isinstance(publisher, KombuPublisher) else None
        handoff = fast(publisher, FastRoutes(app, inst.store.client, check.allowed), check=check, revoked=revoked,
                       lane=lane)
    else:
        handoff = generic(publisher, check=check, revoked=revoked)
    dispatcher = Dispatcher(
        inst.store, config=config, member_id=member_id, pinned=pinned, dead_letters=inst.dead_letters,
        observer=observer, handoff=handoff, periodic=periodic_step(planner),
    )
    if metrics is not None and port is not None:
        bound = metrics.serve(s.metrics_addr, port)
        metrics.follow(dispatcher)
        log_event(logging.INFO, "metrics.serving", addr=s.metrics_addr, port=bound, dispatcher=dispatcher.member_id)
    return dispatcher


def publisher_for(app: Any) -> Publisher:
    """The publisher for the app's broker: batched publisher confirms for RabbitMQ through py-amqp
    (unless ``zset_scheduler_amqp_confirms`` is off), Kombu's producer for any other."""
    s = ensure_installation(app).settings
    if s.amqp_confirms and uses_py_amqp(app):
        # Confirms are waited for well inside the in-flight lease and the shard lease.
        timeout = max(1.0, min(s.inflight_timeout, s.lock_timeout) / 2)
        return ConfirmPublisher(app, confirm_timeout=timeout)
    return KombuPublisher(app)


def uses_py_amqp(app: Any) -> bool:
    """Whether the app's broker (for writing) is RabbitMQ through py-amqp (no connection is made)."""
    with app.connection_for_write() as conn:
        transport = conn.transport
    return getattr(transport, "driver_type", None) == "amqp" and getattr(transport, "driver_name", None) == "py-amqp"
