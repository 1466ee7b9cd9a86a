"""Publishing a batch straight into Kombu's Redis queues: one transaction of multi-value LPUSHes.

Kombu's Redis transport writes each message with one LPUSH (or one buffered pipeline command), after
building its envelope in ``producer.publish``. Here Kombu's own channel still builds the envelope
(``prepare_message``, ``_inplace_augment_message``: body encoding, delivery tag, delivery info) of
the first message of each task, queue and routing, which becomes the template of the next ones
(:mod:`.templates`: the same text with their own ids, arguments, body and tag), picks the priority
sub-queue (``_q_for_pri``) and resolves exchange bindings (``_lookup``, the ``_kombu.binding.*``
table), so what lands in the queue is byte for byte what Kombu writes; only the writes are grouped:
one ``LPUSH key m1 m2 ...`` per queue (same order as one LPUSH each) in one MULTI/EXEC, written by
hand on a connection of the channel's client (keys with its ``global_keyprefix``). The transaction
makes a refused batch all-or-nothing, so a broker error never leaves half a batch published.
Fanout exchanges (pub/sub) and non-Redis transports are left to Kombu.

The shards' leases are checked at the hand-off itself. When the broker is the store's own server and
database (the default: the store defaults to the broker URL), the transaction ``WATCH``es each
shard's lock and epoch keys and reads them first: a lease taken over or expired (Redis aborts a
transaction whose watched key expired) makes ``EXEC`` write nothing, and the check runs again
without that shard. Elsewhere the lease is checked by the dispatcher's clock right before the
transaction. Whether anything in the batch was revoked since its claim is read right before the
transaction too (on the store's database after the ``WATCH``, which covers each shard's revoke
counter as well: a revoke landing before ``EXEC`` makes the check run again; elsewhere, in a
backlog, from the counters the built lane read before it sent its next claim ahead:
:mod:`...dispatch.built`), and revoked messages are left out (I10).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count
from operator import attrgetter, itemgetter
from typing import Any

import redis
from kombu.transport.redis import Channel as RedisChannel
from kombu.transport.redis import PrefixedStrictRedis

from ...dispatch.handoff import Built, Guard, Outgoing
from ...model.codec import StoredMessage
from ...model.internals import usable
from ...store.connections import checkout
from ...store.resp import pack
from .envelope import expiration_of, kombu_expiration, outgoing
from .fast_routes import other_database
from .kombu_internals import KOMBU_REDIS
from .templates import ENVELOPE_JSON, Templates, delivery_tags

ROUTED_TYPES = ("direct", "topic")
WATCH_ATTEMPTS = 5  # a watched lease that keeps changing is a lease being lost: give the shard up
#: The fields of a Built envelope, read in C.
_SHARD, _ENVELOPE, _KEY = attrgetter("shard"), attrgetter("envelope"), attrgetter("key")
_SECOND = itemgetter(1)  # the shard of a write
#: Clients whose transaction is written by hand (any other goes through redis-py's pipeline).
_PLAIN_CLIENTS = (redis.Redis, PrefixedStrictRedis)


def can_publish(producer: Any, messages: Sequence[StoredMessage]) -> bool:
    """True when the producer's channel is a Kombu Redis channel whose private steps are as
    expected (:mod:`.kombu_internals`) and no message goes to a fanout."""
    channel = producer.channel
    if not isinstance(channel, RedisChannel) or not usable(KOMBU_REDIS):
        return False
    exchanges = {m.exchange for m in messages if m.exchange}
    return all(channel.typeof(name).type in ROUTED_TYPES for name in exchanges)


def same_server_and_db(broker: Any, store: Any) -> bool:
    """Whether two clients talk to one Redis server and database (its run id and the db number),
    and the broker's keys are not prefixed (the store's keys then mean the same to both)."""
    try:
        return not getattr(broker, "global_keyprefix", None) and other_database(broker, store) is None
    except (redis.RedisError, AttributeError, TypeError, ValueError):
        return False  # the dispatcher's clock is checked instead


def publish(producer: Any, batch: Sequence[Outgoing | Built], guard: Guard, same_redis: bool,
            templates: Templates | None = None) -> tuple[dict[int, BaseException], set[int], set[int]]:
    """Write the messages of shards still led to their queue(s) in one transaction; raises when the
    broker refuses. Returns the messages refused (index -> error: an envelope that cannot be
    built fails the same way every time), the indexes held back because their lease lapsed, and
    those held back because they were revoked since their claim. ``templates``: the envelope
    templates to build with (:mod:`.templates`; None: Kombu's path for every message). A
    :class:`~...dispatch.handoff.Built` envelope (the store built it) is written as it is.
    """
    channel = producer.channel
    built: list[tuple[int, int, bytes, Sequence[str]]] = []  # index, shard, envelope, Redis lists
    queues: set[str] = set()
    routes: dict[tuple[str, str], list[str]] = {}
    refused: dict[int, BaseException] = {}
    if templates is not None and channel.body_encoding == "base64":
        templates.follow(_setup(producer, channel))
    else:
        templates = None
    # Built envelopes have their tag: one for each message only.
    messages = 0 if set(map(type, batch)) <= {Built} else sum(1 for o in batch if not isinstance(o, Built))
    tags = delivery_tags(messages) if templates is not None else []
    tagged = 0
    lists: dict[tuple[str, int], str] = {}
    if not messages:  # all built by the store (its lane): read in C, one list each
        built = list(zip(count(), map(_SHARD, batch), map(_ENVELOPE, batch), zip(map(_KEY, batch))))
    for i, item in enumerate(batch if messages else ()):
        if isinstance(item, Built):
            built.append((i, item.shard, item.envelope, [item.key]))
            continue
        tagged += 1
        try:
            level, payload, targets = _build(producer, channel, item.message, routes, templates,
                                             tags[tagged - 1] if tags else "")
        except (ConnectionError, OSError, redis.RedisError):  # reading bindings: the broker, not the message
            raise
        except Exception as exc:
            refused[i] = exc
            continue
        keys = []
        for q in targets:
            key = lists.get((q, level))
            if key is None:
                key = lists[(q, level)] = channel._q_for_pri(q, level)
            keys.append(key)
        built.append((i, item.shard, payload, keys))
        queues.update(targets)
    lapsed_shards: set[int] = set()
    revoked: set[int] = set()
    with channel.conn_or_acquire() as client:
        if not same_redis:  # the lease is checked by the dispatcher's clock, right before the write
            lapsed_shards = {shard for shard in set(map(_SECOND, built)) if not guard.still_ours(shard)}
            if not lapsed_shards and len(built) == len(batch):  # every one is a candidate (read in C)
                revoked = set(guard.revoked(batch))
            else:
                candidates = [i for i, shard, _, _ in built if shard not in lapsed_shards]
                revoked = {candidates[n] for n in guard.revoked([batch[i] for i in candidates])}
            commands = _commands(channel, built, queues, lapsed_shards, revoked)
            if commands:
                transaction(client, commands)
            lapsed = {i for i, shard, _, _ in built if shard in lapsed_shards} if lapsed_shards else set()
            return refused, lapsed, revoked
        for _ in range(WATCH_ATTEMPTS):
            shards = {shard for _, shard, _, _ in built} - lapsed_shards
            pipe = client.pipeline(transaction=True)
            try:
                if shards:
                    lapsed_shards |= _watch_leases(pipe, sorted(shards), guard)
                candidates = [i for i, shard, _, _ in built if shard not in lapsed_shards]
                revoked = {candidates[n] for n in guard.revoked([batch[i] for i in candidates], now=True)}
                pipe.multi()
                for command in _commands(channel, built, queues, lapsed_shards, revoked):
                    pipe.execute_command(*command)
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


def _setup(producer: Any, channel: Any) -> tuple[Any, ...]:
    """What an envelope depends on besides the message (a template is valid while it holds)."""
    exchange = producer.exchange
    return (type(channel), channel.body_encoding, tuple(channel.priority_steps), channel.default_priority,
            channel.min_priority, channel.max_priority, getattr(exchange, "name", exchange),
            getattr(exchange, "delivery_mode", None))


def _commands(channel: Any, built: list[tuple[int, int, bytes, Sequence[str]]], queues: set[str],
              lapsed: set[int], revoked: set[int]) -> list[tuple[Any, ...]]:
    """The transaction's commands: one LPUSH per list, then the queues' expiry as Kombu sets it."""
    commands: list[tuple[Any, ...]] = [("LPUSH", key, *payloads)
                                       for key, payloads in _writes(built, lapsed, revoked).items()]
    # Kombu 5.7 expires a queue declared with x-expires on every put; earlier releases have no such map.
    expires = getattr(channel, "_expires", None)
    if commands and expires:
        for queue in queues:
            if queue in expires:
                for step in channel.priority_steps:
                    commands.append(("PEXPIRE", channel._q_for_pri(queue, step), expires[queue]))
    return commands


def transaction(client: Any, commands: list[tuple[Any, ...]]) -> None:
    """``MULTI``, the commands, ``EXEC`` in one write on a pooled connection (the keys, each
    command's first argument, with the client's ``global_keyprefix``): the batch lands whole or not
    at all. Raises the first error. A connection that fails is dropped and the transaction goes
    once through redis-py's pipeline (its retries), as a publish through Kombu would: the
    messages may then land twice, never not at all."""
    if type(client) not in _PLAIN_CLIENTS:
        _pipelined(client, commands)
        return
    prefix = getattr(client, "global_keyprefix", "") or ""
    packed = pack([("MULTI",), *((c[0], prefix + c[1], *c[2:]) for c in commands), ("EXEC",)])
    if packed is None:
        _pipelined(client, commands)
        return
    pool = client.connection_pool
    conn: Any = checkout(pool)
    errors: list[BaseException] = []
    try:
        conn.send_packed_command([packed])
        for _ in range(len(commands) + 1):  # MULTI's OK, then QUEUED for each
            try:
                conn.read_response()
            except redis.ResponseError as exc:
                errors.append(exc)
        try:
            result = conn.read_response()
        except redis.ResponseError as exc:
            errors.append(exc)
            result = None
    except (redis.ConnectionError, redis.TimeoutError):
        conn.disconnect()
        pool.release(conn)
        _pipelined(client, commands)
        return
    except BaseException:
        conn.disconnect()
        pool.release(conn)
        raise
    pool.release(conn)
    if errors:
        raise errors[0]  # a refused command aborts the transaction: its reason, not EXECABORT's
    if not isinstance(result, list):
        raise redis.ResponseError(f"unexpected reply to EXEC: {result!r}")
    for reply in result:
        if isinstance(reply, Exception):
            raise reply


def _pipelined(client: Any, commands: list[tuple[Any, ...]]) -> None:
    pipe = client.pipeline(transaction=True)
    try:
        for command in commands:
            pipe.execute_command(*command)
        pipe.execute()
    finally:
        pipe.reset()


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

def _writes(built: list[tuple[int, int, bytes, Sequence[str]]], lapsed: set[int],
            revoked: set[int]) -> dict[str, list[bytes]]:
    """Redis list -> envelopes, in publish order, without the lapsed shards' or revoked messages."""
    writes: dict[str, list[bytes]] = {}
    if not lapsed and not revoked:  # every one: grouped without a check each
        for _, _, payload, keys in built:
            for key in keys:
                writes.setdefault(key, []).append(payload)
        return writes
    for index, shard, payload, keys in built:
        if shard not in lapsed and index not in revoked:
            for key in keys:
                writes.setdefault(key, []).append(payload)
    return writes


def _build(producer: Any, channel: Any, m: StoredMessage, routes: dict[tuple[str, str], list[str]],
           templates: Templates | None = None, tag: str = "") -> tuple[int, bytes, list[str]]:
    """The envelope Kombu would write for ``m``: its priority level, JSON and target queues;
    from its template when there is one (``tag``: the delivery tag it gets then)."""
    if templates is not None:
        expiration = expiration_of(m)

        def envelope(m: StoredMessage, headers: dict[str, Any], properties: dict[str, Any],
                     expiration: str | None) -> tuple[dict[str, Any], int, str]:
            return kombu_message(producer, channel, m, headers, properties, expiration)

        template = templates.get(m, bool(m.headers.get("eta")), expiration is not None, envelope)
        if template is not None:
            try:
                payload = template.render(m, tag, expiration)
            except (TypeError, ValueError, KeyError, UnicodeError):
                pass  # Kombu's path says what is wrong with it, if anything
            else:
                return template.level, payload, _targets(channel, template.exchange, m.routing_key, routes)
    headers, properties, ttl = outgoing(m)
    message, level, exchange = kombu_message(producer, channel, m, headers, properties,
                                             None if ttl is None else kombu_expiration(ttl))
    return level, ENVELOPE_JSON(message).encode("utf-8"), _targets(channel, exchange, m.routing_key, routes)


def kombu_message(producer: Any, channel: Any, m: StoredMessage, headers: dict[str, Any],
                  properties: dict[str, Any], expiration: str | None) -> tuple[dict[str, Any], int, str]:
    """Kombu's message dict for ``m`` published with these headers, properties (publishable,
    without ``expiration``) and ``expiration`` text, its priority level and its exchange."""
    mode = properties.pop("delivery_mode", None)
    priority = properties.pop("priority", 0)
    # As Producer.publish: the delivery mode falls back to the producer's exchange's, then the TTL.
    exchange, properties["delivery_mode"] = producer._delivery_details(m.exchange or producer.exchange, mode)
    if expiration is not None:
        properties["expiration"] = expiration
    message = channel.prepare_message(
        m.body, priority, m.content_type, m.content_encoding, headers, properties,
    )
    channel._inplace_augment_message(message, exchange, m.routing_key)
    return message, channel._get_message_priority(message, reverse=False), exchange


def _targets(channel: Any, exchange: str, routing_key: str, routes: dict[tuple[str, str], list[str]]) -> list[str]:
    if not exchange:
        return [routing_key]
    targets = routes.get((exchange, routing_key))
    if targets is None:  # bindings read once per exchange and routing key per batch
        targets = routes[(exchange, routing_key)] = list(channel._lookup(exchange, routing_key))
    return targets
