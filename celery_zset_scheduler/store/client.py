"""Creating the redis-py client of the store: the one place a client is made.

redis-py pools re-create their connections in a forked child (they check the pid), which is what
makes ``install(app)`` fork-safe for prefork workers.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from ..errors import ConfigurationError
from ..model.urls import MASK, mask_url

# Short timeouts and few retries: callers (and the dispatcher's own backoff) decide what to do
# during an outage instead of blocking for redis-py's default half a minute of retries.
DEFAULTS: dict[str, Any] = {
    "socket_timeout": 10.0,
    "socket_connect_timeout": 3.0,
    "health_check_interval": 15,
    "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
}


def make_client(url: str, options: dict[str, Any] | None = None) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` with TLS, ``unix://``), bytes replies."""
    kwargs = {**DEFAULTS, **(options or {}), "decode_responses": False}
    try:
        return redis.Redis.from_url(url, **kwargs)
    except ValueError as exc:  # redis-py's words (a bad query value...), with the URL masked
        # urllib's port message quotes the port, which may be a password whose '@host' is missing.
        why = "the port is not a number from 1 to 65535" if str(exc).startswith("Port ") else str(exc)
        raise ConfigurationError(f"invalid Redis URL {mask_url(url)}: {why}") from None


def location(client: redis.Redis) -> str:
    """Where ``client`` connects, as a URL with the password masked (for logs)."""
    kw = client.connection_pool.connection_kwargs
    auth = f"{kw.get('username') or ''}:{MASK}@" if kw.get("password") else ""
    if kw.get("path"):
        return f"unix://{auth}{kw['path']}?db={kw.get('db', 0)}"
    ssl = issubclass(client.connection_pool.connection_class, redis.SSLConnection)
    host = kw.get("host", "localhost")
    host = f"[{host}]" if ":" in str(host) else host
    return f"{'rediss' if ssl else 'redis'}://{auth}{host}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
