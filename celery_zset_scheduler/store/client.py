"""Creating the redis-py client of the store: the one place a client is made.

redis-py pools re-create their connections in a forked child (they check the pid), which is what
makes ``install(app)`` fork-safe for prefork workers. On a Redis Cluster the client is redis-py's
``RedisCluster`` (it follows MOVED/ASK and topology changes); the URL names any node. Through
Sentinel (``sentinel://`` URLs) it is a client of the master the sentinels name (:mod:`.sentinel`).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ..errors import ConfigurationError
from ..model.urls import MASK, is_sentinel_url, mask_url
from . import sentinel

# Short timeouts and few retries: callers (and the dispatcher's own backoff) decide what to do
# during an outage instead of blocking for redis-py's default half a minute of retries.
DEFAULTS: dict[str, Any] = {
    "socket_timeout": 10.0,
    "socket_connect_timeout": 3.0,
    "health_check_interval": 15,
    "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
}


# A cluster client retries a command a few times across a failover (MOVED, a dead node, the
# slot map re-read between attempts) before the caller sees the error.
CLUSTER_RETRY = Retry(ExponentialBackoff(cap=0.5, base=0.05), 3)


def make_client(url: str, options: dict[str, Any] | None = None, cluster: str = "false", *,
                master_name: str | None = None, sentinel_kwargs: dict[str, Any] | None = None) -> Any:
    """A client for ``url`` (``redis://``, ``rediss://`` with TLS, ``unix://``, ``sentinel://``),
    bytes replies.

    ``cluster``: ``"true"`` a ``RedisCluster`` (``url`` names any node), ``"false"`` a plain
    client, ``"auto"`` asks the server (``cluster_enabled`` in ``INFO cluster``). A server that
    cannot be asked (down at that moment) gets a plain client: set ``"true"`` on a cluster.
    A ``sentinel://`` URL (several ``;``-separated) names the sentinels of ``master_name``;
    ``sentinel_kwargs`` are the options of the connections to the sentinels (their password, TLS).
    """
    kwargs = {**DEFAULTS, **(options or {}), "decode_responses": False}
    if is_sentinel_url(url):
        if cluster == "true":
            raise ConfigurationError("a Redis Cluster is not reached through Sentinel: use a redis:// URL of a node")
        return sentinel.make_sentinel_client(url, kwargs, master_name, sentinel_kwargs)
    try:
        client = redis.Redis.from_url(url, **kwargs)
    except ValueError as exc:  # redis-py's words (a bad query value...), with the URL masked
        # urllib's port message quotes the port, which may be a password whose '@host' is missing.
        why = "the port is not a number from 1 to 65535" if str(exc).startswith("Port ") else str(exc)
        raise ConfigurationError(f"invalid Redis URL {mask_url(url)}: {why}") from None
    if cluster == "false" or (cluster == "auto" and not _cluster_enabled(client)):
        return client
    client.close()
    if url.startswith("unix://"):
        raise ConfigurationError(f"a Redis Cluster is reached over TCP, not {mask_url(url)}")
    kwargs.pop("retry", None)
    kwargs.pop("db", None)
    return redis.RedisCluster.from_url(url, retry=CLUSTER_RETRY, **kwargs)


def _cluster_enabled(client: redis.Redis) -> bool:
    try:
        return bool(int(client.info("cluster").get("cluster_enabled", 0)))
    except redis.ResponseError:  # a server without the section (or an ACL refusing INFO)
        return False
    except redis.RedisError:
        return False


def is_cluster(client: Any) -> bool:
    return isinstance(client, redis.RedisCluster)


def location(client: Any) -> str:
    """Where ``client`` connects, as a URL with the password masked (for logs)."""
    if is_cluster(client):
        nodes = sorted(f"{n.host}:{n.port}" for n in client.get_primaries())
        return f"cluster {','.join(nodes)}"
    if sentinel.is_sentinel(client):
        return sentinel.describe(client)
    kw = client.connection_pool.connection_kwargs
    auth = f"{kw.get('username') or ''}:{MASK}@" if kw.get("password") else ""
    if kw.get("path"):
        return f"unix://{auth}{kw['path']}?db={kw.get('db', 0)}"
    ssl = issubclass(client.connection_pool.connection_class, redis.SSLConnection)
    host = kw.get("host", "localhost")
    host = f"[{host}]" if ":" in str(host) else host
    return f"{'rediss' if ssl else 'redis'}://{auth}{host}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
