"""Publishing a batch straight into Kombu's Redis queues: one transaction of multi-value LPUSHes.

Kombu's Redis transport writes each message with one LPUSH (or one buffered pipeline command), after
building its envelope in ``producer.publish``. Here Kombu's own channel still builds every envelope
(``prepare_message``, ``_inplace_augment_message``: body encoding, delivery tag, delivery info),
picks the priority sub-queue (``_q_for_pri``) and resolves exchange bindings (``_lookup``, the
``_kombu.binding.*`` table), so what lands in the queue is byte for byte what Kombu writes; only
the writes are grouped: one ``LPUSH key m1 m2 ...`` per queue (same order as one LPUSH each) in one
MULTI/EXEC, through the channel's client (so ``global_keyprefix`` applies). The transaction makes a
refused batch all-or-nothing, so a broker error never leaves half a batch published.
Fanout exchanges (pub/sub) and non-Redis transports are left to Kombu.

The shards' leases are checked at the hand-off itself. When the broker is the store's own server and
database (the default: the store defaults to the broker URL), the transaction ``WATCH``es each
shard's lock and epoch keys and reads them first: a lease taken over or expired (Redis aborts a
transaction whose watched key expired) makes ``EXEC`` write nothing, and the check runs again
without that shard. Elsewhere the lease is checked by the dispatcher's clock right before the
transaction. Whether anything in the batch was revoked since its claim is read right before the
transaction too (after the ``WATCH``, which covers each shard's revoke counter as well: a revoke
landing before ``EXEC`` makes the check run again), and revoked messages are left out (I10).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from kombu.transport.redis import Channel as RedisChannel
from kombu.utils.json import JSONEncoder

from ...dispatch.handoff import Guard, Outgoing
from ...model.codec import StoredMessage
from .envelope import kombu_expiration, outgoing

ROUTED_TYPES = ("direct", "topic")
WATCH_ATTEMPTS = 5  # a watched lease that keeps changing is a lease being lost: give the shard up


def can_publish(producer: Any, messages: Sequence[StoredMessage]) -> bool:
    """True when the producer's channel is a Kombu Redis channel and no message goes to a fanout."""
    channel = producer.channel
    if not isinstance(channel, RedisChannel):
        return False
    exchanges = {m.exchange for m in messages if m.exchange}
    return all(channel.typeof(name).type in ROUTED_TYPES for name in exchanges)


def same_server_and_db(broker: Any, store: Any) -> bool:
    """Whether two clients talk to one Redis server and database (its run id and the db number),
    and the broker's keys are not prefixed (the store's keys then mean the same to both)."""
    try:
        if getattr(broker, "global_keyprefix", None):
            return False
        same_run = broker.info("server").get("run_id") == store.info("server").get("run_id")
        db = broker.connection_pool.connection_kwargs.get("db", 0)
        return bool(same_run) and int(db) == int(store.connection_pool.connection_kwargs.get("db", 0))
    except (redis.RedisError, AttributeError, TypeError, ValueError):
        return False  # the dispatcher's clock is checked instead


def publish(producer: Any, batch: Sequence[Outgoing], guard: Guard,
            same_redis: bool) -> tuple[dict[int, BaseException], set[int], set[int]]:
    """Write the messages of shards still led to their queue(s) in one transaction; raises when the
    broker refuses. Returns the messages refused (index -> error: an envelope that cannot be
    built fails the same way every time), the indexes held back because their lease lapsed, and
    those held back because they were revoked since their claim.
    """
    channel = producer.channel
    built: list[tuple[int, int, str, list[str]]] = []  # index, shard, envelope, Redis lists
    queues: set[str] = set()
    routes: dict[tuple[str, str], list[str]] = {}
    refused: dict[int, BaseException] = {}
    for i, item in enumerate(batch):
        try:
            level, payload, targets = _build(producer, channel, item.message, routes)
        except (ConnectionError, OSError, redis.RedisError):  # reading bindings: the broker, not the message
            raise
        except Exception as exc:
            refused[i] = exc
            continue
        built.append((i, item.shard, payload, [channel._q_for_pri(q, level) for q in targets]))
        queues.update(targets)
    lapsed_shards: set[int] = set()
    revoked: set[int] = set()
    with channel.conn_or_acquire() as client:
        for _ in range(WATCH_ATTEMPTS):
            shards = {shard for _, shard, _, _ in built} - lapsed_shards
            pipe = client.pipeline(transaction=True)
            try:
                if same_redis and shards:
                    lapsed_shards |= _watch_leases(pipe, sorted(shards), guard)
                else:
                    lapsed_shards |= {s for s in shards if not guard.still_ours(s)}
                candidates = [i for i, shard, _, _ in built if shard not in lapsed_shards]
                revoked = {candidates[n] for n in guard.revoked([batch[i] for i in candidates])}
                pipe.multi()
                for key, payloads in _writes(built, lapsed_shards, revoked).items():
                    pipe.lpush(key, *payloads)
                for queue in queues:
                    if channel._expires and queue in channel._expires:  # as Kombu does on every put
                        for step in channel.priority_steps:
                            pipe.pexpire(channel._q_for_pri(queue, step), channel._expires[queue])
                try:
                    pipe.execute()
                except redis.WatchError:  # a watched lease or revoke counter changed meanwhile: check again
                    continue
            finally:
                pipe.reset()
            break
        else:
            lapsed_shards |= {shard for _, shard, _, _ in built}  # leases never held still: publish nothing
    lapsed = {i for i, shard, _, _ in built if shard in lapsed_shards}
    return refused, lapsed, revoked - lapsed


def _watch_leases(pipe: Any, shards: list[int], guard: Guard) -> set[int]:
    """WATCH the shards' lock and epoch keys and read them; the shards no longer held by the
    batch's fences. From here to EXEC, a change to any of them aborts the transaction."""
    keys = [k for s in shards for k in guard.lease_keys(s)]
    pipe.watch(*keys, *(guard.revoke_key(s) for s in shards))
    values = pipe.mget(keys)
    lapsed = set()
    for n, shard in enumerate(shards):
        fence = guard.fence(shard)
        token, epoch = values[2 * n], values[2 * n + 1]
        if token is None or token.decode() != fence.token or epoch is None or int(epoch) != fence.epoch:
            lapsed.add(shard)
    return lapsed

#: Kombu's ``dumps`` (``json.dumps(cls=JSONEncoder)``) with the encoder made once, not per message:
#: the same text.
_ENVELOPE_JSON = JSONEncoder().encode


def _writes(built: list[tuple[int, int, str, list[str]]], lapsed: set[int],
            revoked: set[int]) -> dict[str, list[str]]:
    """Redis list -> envelopes, in publish order, without the lapsed shards' or revoked messages."""
    writes: dict[str, list[str]] = {}
    for index, shard, payload, keys in built:
        if shard not in lapsed and index not in revoked:
            for key in keys:
                writes.setdefault(key, []).append(payload)
    return writes


def _build(producer: Any, channel: Any, m: StoredMessage,
           routes: dict[tuple[str, str], list[str]]) -> tuple[int, str, list[str]]:
    """The envelope Kombu would write for ``m``: its priority level, JSON and target queues."""
    headers, properties, expiration = outgoing(m)
    mode = properties.pop("delivery_mode", None)
    priority = properties.pop("priority", 0)
    # As Producer.publish: the delivery mode falls back to the producer's exchange's, then the TTL.
    exchange, properties["delivery_mode"] = producer._delivery_details(m.exchange or producer.exchange, mode)
    if expiration is not None:
        properties["expiration"] = kombu_expiration(expiration)
    message = channel.prepare_message(
        m.body, priority, m.content_type, m.content_encoding, headers, properties,
    )
    channel._inplace_augment_message(message, exchange, m.routing_key)
    if exchange:
        targets = routes.get((exchange, m.routing_key))
        if targets is None:  # bindings read once per exchange and routing key per batch
            targets = routes[(exchange, m.routing_key)] = list(channel._lookup(exchange, m.routing_key))
    else:
        targets = [m.routing_key]
    level = channel._get_message_priority(message, reverse=False)
    return level, _ENVELOPE_JSON(message), targets
