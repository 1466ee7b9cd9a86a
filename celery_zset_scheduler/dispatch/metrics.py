"""Prometheus metrics of a dispatcher (``zset_scheduler_metrics_port``).

:class:`DispatcherMetrics` is an :class:`~.observer.Observer`: the dispatcher reports claims,
publishes, leadership changes, reaps, dead letters and outages to it as they happen. The gauges
(pending, in flight, lag) come from a snapshot thread that reads the shards this dispatcher leads
every ``SNAPSHOT_INTERVAL`` seconds, so the sum of a gauge over all dispatchers is the store's
total, each shard counted once. Each dispatcher has its own registry: several in one process
(tests, ``beat`` plus ``run``) never collide.

``prometheus-client`` is an optional extra (``pip install 'celery-zset-scheduler[metrics]'``);
it is imported only when metrics are switched on.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis

from ..errors import ConfigurationError
from ..model.logs import describe, log_event
from ..store.snapshot import read_shards
from .observer import Observer, Observers

if TYPE_CHECKING:
    from .loop import Dispatcher

SNAPSHOT_INTERVAL = 2.0
NAMESPACE = "celery_zset"
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)


SETTING = "zset_scheduler_metrics_port"


def _prometheus(asked_by: str = SETTING) -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigurationError(
            f"{asked_by} is set but prometheus-client is not installed: "
            "pip install 'celery-zset-scheduler[metrics]'"
        ) from None
    return prometheus_client


class DispatcherMetrics(Observer):
    """The metrics of one dispatcher, in a registry of its own.

    ``asked_by`` names what asked for them (the setting, or ``--metrics-port``) in errors.
    """

    def __init__(self, asked_by: str = SETTING) -> None:
        self.asked_by = asked_by
        prom = _prometheus(asked_by)
        self.registry = prom.CollectorRegistry(auto_describe=True)

        def make(kind: str, name: str, doc: str, labels: Sequence[str] = (), **kw: Any) -> Any:
            return getattr(prom, kind)(name, doc, list(labels), namespace=NAMESPACE, registry=self.registry, **kw)

        shard = ("shard",)
        self.pending = make("Gauge", "pending_tasks", "Pending tasks of a shard this dispatcher leads.", shard)
        self.inflight = make("Gauge", "inflight_tasks", "Claimed, not yet acknowledged tasks of a led shard.", shard)
        self.lag = make("Gauge", "lag_seconds",
                        "Redis time minus the oldest due time of a led shard (0 when none is overdue).", shard)
        self.leader = make("Gauge", "leader", "1 while this dispatcher leads the shard, else 0.", shard)
        self.dispatched = make("Counter", "dispatched_tasks", "Tasks handed to the broker.", shard)
        self.claim_seconds = make("Histogram", "claim_duration_seconds",
                                  "Claim round trip, observed once per shard claimed.", buckets=DURATION_BUCKETS)
        self.publish_seconds = make("Histogram", "publish_duration_seconds",
                                    "Publishing one batch to the broker.", buckets=DURATION_BUCKETS)
        self.lateness = make("Histogram", "lateness_seconds",
                             "Dispatch time minus due time (Redis clock), per task.", buckets=LATENESS_BUCKETS)
        self.leader_changes = make("Counter", "leader_changes",
                                   "Shard leaderships this dispatcher took (acquired) or gave up or lost (released).",
                                   ("shard", "change"))
        self.reaped_tasks = make("Counter", "reaped_tasks", "Expired in-flight tasks returned to due.", shard)
        self.dead_lettered_tasks = make("Counter", "dead_lettered_tasks",
                                        "Tasks this dispatcher sent to the dead-letter store.", ("reason",))
        self.dead_letters = make("Gauge", "dead_letters",
                                 "Entries in the dead-letter store (the same on every dispatcher: aggregate with max).")
        self.worker_events = make("Gauge", "worker_events",
                                  "Events workers counted in the store's stats hash, e.g. "
                                  "idempotency_lease_lost_completions (the same on every dispatcher: aggregate "
                                  "with max).", ("event",))
        self.outages_total = make("Counter", "outages", "Redis or broker outages this dispatcher saw begin.",
                                  ("what",))
        self.orphaned_entries = make("Counter", "orphaned_entries",
                                     "Ids found in due without a stored message (dropped: nothing to publish).",
                                     shard)
        self.revoked_entries = make("Counter", "revoked_entries",
                                    "Revoked tasks dropped instead of handed to the broker.", shard)
        self._exported: set[int] = set()
        self._server: WSGIServer | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.port: int | None = None

    # -- Observer -------------------------------------------------------------------------------

    def claimed(self, shard: int, count: int, seconds: float) -> None:
        self.claim_seconds.observe(seconds)

    def published(self, per_shard: Mapping[int, int], lateness_ms: Sequence[int], seconds: float) -> None:
        self.publish_seconds.observe(seconds)
        for shard, count in per_shard.items():
            self.dispatched.labels(str(shard)).inc(count)
        for late in lateness_ms:
            self.lateness.observe(max(0, late) / 1000.0)

    def leadership(self, shard: int, acquired: bool) -> None:
        self.leader_changes.labels(str(shard), "acquired" if acquired else "released").inc()
        self.leader.labels(str(shard)).set(1 if acquired else 0)

    def reaped(self, shard: int, count: int) -> None:
        self.reaped_tasks.labels(str(shard)).inc(count)

    def dead_lettered(self, reason: str, count: int) -> None:
        self.dead_lettered_tasks.labels(reason).inc(count)

    def _set_state(self, shard: int, pending: int, inflight: int, oldest_due_ms: int | None, now_ms: int) -> None:
        label = str(shard)
        self.pending.labels(label).set(pending)
        self.inflight.labels(label).set(inflight)
        lag = 0 if oldest_due_ms is None else max(0, now_ms - oldest_due_ms)
        self.lag.labels(label).set(lag / 1000.0)

    def outage(self, what: str, error: BaseException) -> None:
        self.outages_total.labels(what).inc()

    def orphaned(self, shard: int, count: int) -> None:
        self.orphaned_entries.labels(str(shard)).inc(count)

    def revoked(self, shard: int, count: int) -> None:
        self.revoked_entries.labels(str(shard)).inc(count)

    # -- snapshot and serving -------------------------------------------------------------------

    def snapshot(self, store: Any, owned: Iterable[int]) -> None:
        """Refresh the gauges of the led shards; drop those of shards no longer led."""
        shards = sorted(owned)
        for gone in self._exported - set(shards):
            for gauge in (self.pending, self.inflight, self.lag):
                with contextlib.suppress(KeyError):
                    gauge.remove(str(gone))
        self._exported = set(shards)
        self.dead_letters.set(int(store.client.zcard(store.keys.dlq_index)))
        for event, count in store.client.hgetall(store.keys.stats).items():
            self.worker_events.labels(event.decode()).set(int(count))
        if not shards:
            return
        now_ms, states = read_shards(store, shards, leaders=False)
        for s in states:
            self._set_state(s.shard, s.pending, s.inflight, s.oldest_due_ms, now_ms)

    def serve(self, addr: str, port: int) -> int:
        """Serve ``/metrics`` on ``addr:port`` (0: any free port); returns the bound port."""
        prom = _prometheus(self.asked_by)
        server_cls = _Server6 if ":" in addr else _Server
        try:
            server = make_server(addr, port, prom.make_wsgi_app(self.registry), server_cls, handler_class=_Quiet)
        except OSError as exc:
            raise ConfigurationError(f"{self.asked_by}: cannot listen on {addr}:{port}: {exc}") from exc
        self._server = server
        self.port = int(server.server_address[1])
        self._spawn(server.serve_forever, "zset-metrics-http")
        return self.port

    def follow(self, dispatcher: Dispatcher, interval: float = SNAPSHOT_INTERVAL) -> None:
        """Snapshot ``dispatcher``'s shards until it stops, then stop serving."""

        def loop() -> None:
            warned = False
            while not self._stop.is_set() and not dispatcher.stopping:
                try:
                    self.snapshot(dispatcher.store, list(dispatcher.leadership.owned))
                    warned = False
                except (redis.RedisError, OSError) as exc:  # the dispatcher reports outages itself
                    if not warned:
                        log_event(logging.DEBUG, "metrics.snapshot_failed", error=describe(exc))
                    warned = True
                self._stop.wait(interval)
            self.close()

        self._spawn(loop, "zset-metrics-snapshot")

    def close(self) -> None:
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not worth a log line each."""


def metrics_of(observer: Observer) -> DispatcherMetrics | None:
    """The metrics among a dispatcher's observers, if it has any."""
    if isinstance(observer, DispatcherMetrics):
        return observer
    if isinstance(observer, Observers):
        found = observer.find(DispatcherMetrics)
        return found if isinstance(found, DispatcherMetrics) else None
    return None
