"""The least-privilege Redis users of a Celery app with this plugin: one ``ACL SETUSER`` per
server (the store, a Redis broker, a Redis result backend; merged where they are one server).

Besides the store's own rules (:mod:`..store.acl`), a process needs Kombu's keys on a Redis
broker (the queues, the bindings, the unacked index a worker keeps, the remote-control replies)
and its channels (the broadcast pidbox), and Celery's result keys on a Redis backend.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from ...model.keys import KeySpace
from ...model.urls import is_sentinel_url, parse_sentinel_url
from ...store.acl import ROLES, Rules, store_rules
from ...store.permissions import glob_escape
from .state import broker_redis_url, read_settings

# Kombu's Redis transport: the connection, the bindings and queue declarations, publishing.
_KOMBU_CLIENT = ("ping", "select", "multi", "exec", "discard", "watch", "unwatch",
                 "smembers", "sadd", "srem", "lpush", "llen", "exists", "del", "publish")
# A consumer: blocking fetches, the unacked index (a hash, a sorted set, a lock taken with
# SET NX PX and released by redis-py's Lua script), the broadcast (PSUBSCRIBE) channel.
_KOMBU_CONSUMER = ("brpop", "rpop", "zadd", "zrem", "zrange", "zrevrangebyscore", "hset", "hget", "hdel",
                   "set", "get", "pexpire", "evalsha", "script|load", "script|exists",
                   "psubscribe", "punsubscribe", "subscribe", "unsubscribe")
# Celery's Redis result backend: results (SET with an expiry, PUBLISH for waiters) and chords.
_RESULTS = ("ping", "select", "get", "mget", "set", "setex", "del", "expire", "publish", "subscribe",
            "unsubscribe", "incr", "rpush", "lrange", "llen", "zadd", "zcount", "zrange",
            "multi", "exec", "discard", "evalsha", "script|load", "script|exists")
_RESULT_KEYS = ("celery-task-meta-*", "celery-taskset-meta-*", "chord-unlock-*")


@dataclass(frozen=True)
class Server:
    """One Redis server of the app, as an ACL user sees it."""

    key: str  # user@host:port, or user@ the Sentinel master's name: one ACL user on one server
    label: str  # masked, for people
    username: str | None
    password: str | None


@dataclass(frozen=True)
class UserPlan:
    server: Server
    serves: tuple[str, ...]  # "the store", "the broker", "the result backend"
    rules: Rules

    def command(self, role: str, user: str | None = None) -> str:
        """``ACL SETUSER`` for this server: the URL's user (else ``user``, else ``zset-<role>``), the
        URL's password by its SHA-256 (never the password itself)."""
        name = self.server.username or user or f"zset-{role}"
        secret = (f"#{hashlib.sha256(self.server.password.encode()).hexdigest()}"
                  if self.server.password else ">CHANGE-ME")
        return " ".join(["ACL", "SETUSER", name, "on", secret, *self.rules.words()])


def server_of(url: str, master_name: str | None = None) -> Server:
    if is_sentinel_url(url):
        parsed = parse_sentinel_url(url)
        name = master_name or "mymaster"
        return Server(f"{parsed.username or ''}@sentinel:{name}", f"the Sentinel master {name!r} (every node)",
                      parsed.username, parsed.password)
    parts = urlsplit(url)
    user = unquote(parts.username) if parts.username else None
    return Server(f"{user or ''}@{parts.hostname}:{parts.port or 6379}", f"{parts.hostname}:{parts.port or 6379}",
                  user, unquote(parts.password) if parts.password else None)


def queue_names(app: Any) -> list[str]:
    names = [app.conf.task_default_queue]
    names.extend(app.amqp.queues.keys())
    return list(dict.fromkeys(n for n in names if n))


def kombu_rules(app: Any, role: str, db: int, *, extra_queues: tuple[str, ...] = ()) -> Rules:
    """What ``role`` needs on a Redis broker."""
    options = app.conf.broker_transport_options or {}
    prefix = str(options.get("global_keyprefix", ""))
    fanout = f"/{db}." if options.get("fanout_prefix", True) is True else str(options.get("fanout_prefix") or "")
    queues = [*queue_names(app), *extra_queues]
    keys = [f"{prefix}{glob_escape(q)}*" for q in queues]  # with the priority lists `<queue>\x06\x16<n>`
    keys.append(f"{prefix}_kombu.binding*")  # and Kombu 5.7's _kombu.binding_permanent.
    commands = list(_KOMBU_CLIENT)
    pidbox = f"{prefix}{fanout}{app.conf.control_exchange}.pidbox"
    # app.control broadcasts (revoke, ping); a dispatcher broadcasts nothing
    channels = [] if role == "dispatcher" else [glob_escape(pidbox)]
    # events (task_send_sent_event, worker_send_task_events) are published to the event
    # exchange's topics (/{db}.celeryev/<routing key>)
    channels.append(glob_escape(f"{prefix}{fanout}{app.conf.event_exchange}") + "*")
    if str(app.conf.result_backend or "").startswith("rpc"):
        # the rpc:// backend's reply queue is named by the client's uuid (and its priority lists)
        keys.append(f"{prefix}????????-????-????-????-????????????*")
    if role in ("worker", "cli"):
        # a worker consumes and answers remote control; the CLI asks workers (doctor, inspect)
        commands.extend(_KOMBU_CONSUMER)
        keys.extend(f"{prefix}{options.get(name, default)}" for name, default in (
            ("unacked_key", "unacked"), ("unacked_index_key", "unacked_index"),
            ("unacked_mutex_key", "unacked_mutex")))
        # the worker's own pidbox queue (<hostname>.celery.pidbox) and the replies
        # (<uuid>.reply.celery.pidbox)
        keys.append(f"{prefix}*.{app.conf.control_exchange}.pidbox*")
        keys.append(f"{prefix}{app.conf.event_exchange}*")  # gossip, events
        channels.append(glob_escape(pidbox) + "/*")
    return Rules(commands=tuple(dict.fromkeys(commands)), keys=tuple(keys), channels=tuple(channels))


def result_rules(app: Any) -> Rules:
    options = app.conf.result_backend_transport_options or {}
    prefix = str(options.get("global_keyprefix", ""))
    keys = tuple(f"{prefix}{k}" for k in _RESULT_KEYS)
    return Rules(commands=_RESULTS, keys=keys, channels=keys)


def _db(url: str) -> int:
    path = urlsplit(url).path.strip("/") if not is_sentinel_url(url) else ""
    return int(path) if path.isdigit() else 0


def plan_users(app: Any, role: str, *, extra_queues: tuple[str, ...] = ()) -> list[UserPlan]:
    """The rules ``role`` needs on each Redis server of ``app``, one plan per server."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    settings = read_settings(app)
    plans: dict[str, UserPlan] = {}

    def add(server: Server, what: str, rules: Rules) -> None:
        known = plans.get(server.key)
        if known is None:
            plans[server.key] = UserPlan(server, (what,), rules)
        else:
            plans[server.key] = UserPlan(known.server, (*known.serves, what), known.rules + rules)

    store_url = str(settings.url)
    add(server_of(store_url, settings.master_name), "the store",
        store_rules(role, KeySpace(settings.prefix, settings.shards), wait_replicas=settings.wait_replicas,
                    detect_cluster=settings.cluster == "auto" and not is_sentinel_url(store_url)))
    broker = broker_redis_url(app)
    if broker is not None:
        master = (app.conf.broker_transport_options or {}).get("master_name")
        first = broker.split(";")[0]
        add(server_of(first, master), "the broker", kombu_rules(app, role, _db(first), extra_queues=extra_queues))
    backend = str(app.conf.result_backend or "")
    if backend.startswith(("redis://", "rediss://")) and role in ("producer", "worker"):
        add(server_of(backend), "the result backend", result_rules(app))
    return list(plans.values())
