"""A store client through Redis Sentinel: redis-py's own Sentinel support, and one addition.

redis-py asks the sentinels for the master when it opens a connection, and drops a connection
whose server answers as a replica. After a graceful ``SENTINEL FAILOVER`` the old master goes on
accepting writes until the sentinels reconfigure it, about ten seconds later, and whatever is
written there meanwhile is lost (measured: every write of a client with an open connection, for
11 s). So the pool here also asks the sentinels at most once a :data:`CHECK_INTERVAL` when it
hands out a connection, and closes the connections to a master the sentinels no longer name.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool

from ..errors import ConfigurationError
from ..model.urls import MASK, parse_sentinel_url

#: How often a pool in use asks the sentinels which server is the master (seconds).
CHECK_INTERVAL = 1.0

#: Timeouts of the connections to the sentinels themselves (a user's ``sentinel_kwargs`` win):
#: one sentinel that does not answer must not hold a discovery longer than this.
SENTINEL_DEFAULTS: dict[str, Any] = {"socket_timeout": 1.0, "socket_connect_timeout": 1.0}


class FollowingPool(SentinelConnectionPool):
    """redis-py's Sentinel pool that also checks the master's address while it is used."""

    def __init__(self, service_name: str, sentinel_manager: Sentinel, **kwargs: Any) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self._next_check = 0.0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL
            self.follow()
        return super().get_connection(*args, **kwargs)

    # The parent's signature, for callers that read it (store/connections.py: redis-py 5.0 wants
    # a command name, newer releases warn on one).
    get_connection.__signature__ = inspect.signature(SentinelConnectionPool.get_connection)  # type: ignore[attr-defined]

    def follow(self) -> None:
        """Ask the sentinels for the master; when it moved, close every connection to the old one,
        those in use too: a pub/sub connection (the wake channel, the revoke follower) would
        otherwise stay subscribed to the demoted master, which no longer hears a publication. A
        command in flight there fails and is retried through the new master. When no sentinel
        answers, the connections keep their server until it fails."""
        before = self.master_address
        with contextlib.suppress(MasterNotFoundError, redis.ConnectionError, redis.TimeoutError):
            after = self.get_master_address()  # type: ignore[no-untyped-call]
            if before is not None and after != before:
                self.disconnect(inuse_connections=True)


def make_sentinel_client(url: str, kwargs: dict[str, Any], master_name: str | None,
                         sentinel_kwargs: dict[str, Any] | None) -> redis.Redis:
    """A client of the master named ``master_name``, found through the sentinels of ``url``."""
    try:
        target = parse_sentinel_url(url)
    except ValueError as exc:
        raise ConfigurationError(f"invalid Sentinel URL: {exc}") from None
    if not master_name:
        raise ConfigurationError(
            "a sentinel:// store needs the master's name: set zset_scheduler_master_name "
            "(or broker_transport_options['master_name'] when the broker uses the same sentinels)"
        )
    master_kwargs = {**kwargs, "db": target.db}
    if target.username is not None:
        master_kwargs["username"] = target.username
    if target.password is not None:
        master_kwargs["password"] = target.password
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs={**SENTINEL_DEFAULTS, **(sentinel_kwargs or {})})
    client: redis.Redis = sentinel.master_for(master_name, redis_class=redis.Redis,
                                              connection_pool_class=FollowingPool, **master_kwargs)
    return client


def is_sentinel(client: Any) -> bool:
    return isinstance(getattr(client, "connection_pool", None), SentinelConnectionPool)


def describe(client: Any) -> str:
    """The sentinels and the master's name (for logs), and the master's address when known."""
    pool = client.connection_pool
    hosts = ",".join(f"{c.connection_pool.connection_kwargs.get('host')}:"
                     f"{c.connection_pool.connection_kwargs.get('port')}"
                     for c in pool.sentinel_manager.sentinels)
    kw = pool.connection_kwargs
    master = pool.master_address
    now = f" (now {master[0]}:{master[1]})" if master else ""
    user = kw.get("username") or ""
    auth = f"{user}:{MASK}@" if kw.get("password") else ""
    return f"sentinel://{auth}{hosts}/{kw.get('db', 0)} master {pool.service_name}{now}"


@dataclass(frozen=True)
class SentinelView:
    """What the sentinels and the master say, for ``doctor``."""

    master_name: str
    sentinels: tuple[str, ...]  # host:port of every sentinel of the URL
    reached: tuple[str, ...]  # the ones that answered about the master
    masters: tuple[str, ...]  # the master's address as each of those reports it
    quorum: int | None
    replicas: tuple[tuple[str, str, int], ...]  # address, state, lag in seconds (the master's view)
    problems: tuple[str, ...]  # sentinels that could not be asked, and why


def read_sentinels(client: Any) -> SentinelView:
    pool = client.connection_pool
    name = str(pool.service_name)
    addresses, reached, masters, problems = [], [], [], []
    quorum: int | None = None
    for sentinel in pool.sentinel_manager.sentinels:
        kw = sentinel.connection_pool.connection_kwargs
        address = f"{kw.get('host')}:{kw.get('port')}"
        addresses.append(address)
        try:
            state = sentinel.sentinel_master(name)
        except redis.RedisError as exc:
            problems.append(f"{address}: {' '.join(str(exc).split())}")
            continue
        reached.append(address)
        masters.append(f"{state.get('ip')}:{state.get('port')}")
        quorum = int(state.get("quorum", 0)) or quorum
    replicas = []
    info = client.info("replication")
    for key, value in sorted(info.items()):
        if key.startswith("slave") and isinstance(value, dict):
            address = f"{value.get('ip')}:{value.get('port')}"
            replicas.append((address, str(value.get("state")), int(value.get("lag", 0))))
    return SentinelView(name, tuple(addresses), tuple(reached), tuple(masters), quorum, tuple(replicas),
                        tuple(problems))
