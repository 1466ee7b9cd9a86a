"""Creating the redis-py client of the store: the one place a client is made.

redis-py pools re-create their connections in a forked child (they check the pid), which is what
makes ``install(app)`` fork-safe for prefork workers.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

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
    return redis.Redis.from_url(url, **kwargs)
