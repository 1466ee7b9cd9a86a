"""The fast path's route table, from the app's Kombu setup: where ``fast_push`` may write.

The table is built once per dispatcher (again after an error) when the broker is Kombu's Redis
transport on the store's own standalone server and database: the same run id and database number,
and no Redis Cluster. It names, for every queue the app declares that Kombu would not expire
(``x-expires`` makes its bindings change under a running script), the list of each priority step
(``_q_for_pri``, with ``global_keyprefix``), and for every direct or topic exchange of those queues
its ``_kombu.binding.*`` set (and the set that marks a binding permanent). The queues are declared
first, as the generic publisher does before publishing, so their bindings exist. A message for
anything the table does not name (a fanout, a queue only its sender knew) takes the generic path.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Generic, TypeVar

import redis
from kombu.exceptions import OperationalError
from kombu.transport.redis import Channel as RedisChannel
from kombu.transport.redis import SentinelChannel
from kombu.transport.virtual.exchange import TopicExchange

from ...model.logs import describe, log_event
from ...store.fastpath import FAST_PUSH, Routes
from ..transport.redis_broker import Channel as OurChannel
from .declare import declare
from .reach import reachable

RETRY_AFTER_S = 5.0  # after a failed detection (the broker was unreachable), try again this much later
#: The topic wildcards the script matches as Kombu 5.7 does; before 5.7 Kombu's ``*`` also matches
#: several words, so there a topic exchange takes the generic path (Kombu's own routing).
TOPIC_WILDCARDS = {"*": r"[^\.]+", "#": r".*?"}


def routed_types() -> tuple[str, ...]:
    """The exchange types the script routes exactly as the running Kombu does."""
    if getattr(TopicExchange, "wildcards", None) == TOPIC_WILDCARDS:
        return ("direct", "topic")
    return ("direct",)


ROUTED_TYPES = routed_types()
FIRST_KEY = len(FAST_PUSH.keys) + 1  # the script's own keys come first (KEYS[1..14])


T = TypeVar("T")


class Decided(Generic[T]):
    """A table decided once from the broker (again after an error): None until then, and None
    when the broker does not allow it. While the broker cannot be reached the caller goes on
    without it, and the detection is tried again after :data:`RETRY_AFTER_S`."""

    event = ""  # the log event's prefix

    def __init__(self) -> None:
        self.why: str | None = None  # why the table is None, once decided
        self._value: T | None = None
        self._decided = False
        self._retry_at = 0.0

    def __call__(self) -> T | None:
        if self._decided:
            return self._value
        if time.monotonic() < self._retry_at:
            return None
        try:
            self._value = self._build()
        except redis.exceptions.NoPermissionError as exc:  # the ACL user's choice: decided, said once
            self._value = None
            self.why = (f"this Redis user may not run what the detection needs ({describe(exc)}; "
                        "ACL: +info, the broker's keys)")
        except (OSError, redis.RedisError, OperationalError) as exc:  # the broker is down: without it for now
            self._retry_at = time.monotonic() + RETRY_AFTER_S
            log_event(logging.WARNING, f"{self.event}.undecided", error=str(exc))
            return None
        self._decided = True
        self._announce(self._value)
        return self._value

    def _build(self) -> T | None:
        raise NotImplementedError

    def _announce(self, value: T | None) -> None:
        if value:
            log_event(logging.INFO, f"{self.event}.on")
        else:
            log_event(logging.INFO, f"{self.event}.off", why=self.why)


class FastRoutes(Decided[Routes]):
    """A :data:`~...dispatch.fastpath.RouteSource`: the table, or None for the generic path."""

    event = "fast_path"

    def __init__(self, app: Any, store_client: Any, accept: set[str]) -> None:
        super().__init__()
        self.app = app
        self.store_client = store_client
        self.accept = sorted(accept)

    def _build(self) -> Routes | None:
        with self.app.producer_or_acquire() as producer:
            channel, self.why = redis_channel(producer)
            if channel is None:
                return None
            with channel.conn_or_acquire() as client:
                self.why = other_database(client, self.store_client)
                if self.why is not None:
                    return None
            queues = declared_queues(self.app, producer)
            return table(channel, producer, queues, self.accept)


#: Kombu's Redis channels whose queues the Lua builder writes as Kombu does (Sentinel's only
#: finds its server differently; this package's only keeps its connection's parameters longer).
REDIS_CHANNELS = (RedisChannel, SentinelChannel, OurChannel)


def redis_channel(producer: Any) -> tuple[Any | None, str | None]:
    """The producer's channel when it is Kombu's Redis transport with base64 bodies (what the
    Lua builder writes), else None and why; raises at once when the broker cannot be reached."""
    reachable(producer)
    channel = producer.channel
    if type(channel) not in REDIS_CHANNELS:
        return None, f"the broker is not Kombu's Redis transport ({type(channel).__module__}.{type(channel).__name__})"
    if channel.body_encoding != "base64":
        return None, f"the broker's body_encoding is {channel.body_encoding!r}, not 'base64'"
    return channel, None


def declared_queues(app: Any, producer: Any) -> list[Any]:
    """The app's queues Kombu would not expire, declared as the publisher declares them."""
    policy = app.conf.task_publish_retry_policy
    queues = [q for q in app.amqp.queues.values() if not _expiring(q)]
    for queue in queues:
        declare(producer, queue, policy)
    return queues


def other_database(broker: Any, store: Any) -> str | None:
    """Why the broker is not the store's standalone server (run id) and database, or None when it is."""
    if not isinstance(store, redis.Redis):
        return "the store is a Redis Cluster"
    if not isinstance(broker, redis.Redis):
        return f"the broker's client is a {type(broker).__name__}"
    server = broker.info("server")
    if server.get("redis_mode", "standalone") != "standalone":
        return f"the broker's Redis runs in {server.get('redis_mode')} mode"
    if server.get("run_id") != store.info("server").get("run_id"):
        return "the broker is another Redis server than the store's"
    db = int(broker.connection_pool.connection_kwargs.get("db", 0))
    store_db = int(store.connection_pool.connection_kwargs.get("db", 0))
    if db != store_db:
        return f"the broker uses database {db} of the store's server, the store database {store_db}"
    return None


def table(channel: Any, producer: Any, queues: list[Any], accept: list[str]) -> Routes:
    prefix = channel.global_keyprefix or ""
    keys: list[str] = []

    def key(name: str) -> int:
        keys.append(prefix + name)
        return FIRST_KEY + len(keys) - 1

    steps = list(channel.priority_steps)
    lists: dict[str, list[int]] = {}
    types: dict[str, set[str]] = {}
    for queue in queues:
        lists.setdefault(queue.name, [key(channel._q_for_pri(queue.name, step)) for step in steps])
        if queue.exchange is not None and queue.exchange.name:
            types.setdefault(queue.exchange.name, set()).add(queue.exchange.type)
    exchanges: dict[str, dict[str, Any]] = {}
    permanent = getattr(channel, "keyprefix_binding_permanent", None)
    for name, kinds in sorted(types.items()):
        (kind,) = kinds if len(kinds) == 1 else ("mixed",)
        if kind not in ROUTED_TYPES or channel.typeof(name).type != kind:
            continue  # a fanout, a type Kombu would not use, or declared twice with two types
        exchanges[name] = {"type": kind, "key": key(channel.keyprefix_queue % (name,)), "sep": channel.sep}
        if permanent:  # Kombu >= 5.6 marks the bindings it never expires
            exchanges[name]["permanent"] = key(permanent % (name,))
    mode = producer._delivery_details("", None)[1]
    data = {"accept": accept, "steps": steps, "queues": lists, "exchanges": exchanges, "mode": mode}
    return Routes(tuple(keys), json.dumps(data))


def _expiring(queue: Any) -> bool:
    arguments = queue.queue_arguments or {}
    return queue.expires is not None or "x-expires" in arguments or bool(queue.auto_delete)
