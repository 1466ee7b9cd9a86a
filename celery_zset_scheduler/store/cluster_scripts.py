"""Running script calls on a Redis Cluster: grouped by the node that serves each call's slot.

redis-py's cluster client refuses scripts inside pipelines, and one ``EVALSHA`` a round trip
would make a claim pass cost one round trip per shard. So the calls of a pass are grouped by
node, each node's group is written on one of its connections, and only then are the replies read:
one round trip for the whole pass, however many nodes it touches. Every call stays in one slot
(a shard's keys share a hash tag), so a group never needs more than its node.

What a reply says decides what happens to its call:

- ``NOSCRIPT`` (a failover promoted a replica whose script cache is empty; the cache is per
  node): the scripts are loaded on that node and only the calls that did not run are sent again;
- ``MOVED``, ``TRYAGAIN``, ``CLUSTERDOWN`` (the slot map changed, a failover is under way): the
  call did not run; the slot map is read again and the call is sent to the slot's node now;
- ``ASK`` (a slot being migrated): ``ASKING`` and the call on the node it names;
- a node that cannot be connected to: nothing was sent there; the slot map is read again and its
  calls go to the node it names now, if another; otherwise they get the connection error as
  their reply at once, so the shards on that node wait while the others go on;
- a connection lost after sending: the call may have run; it gets the error (never re-sent).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import AskError, ClusterDownError, MovedError, NoScriptError, TryAgainError

from .connections import checkout
from .scripts import Call, Scripts

ATTEMPTS = 4  # rounds for calls that did not run (redirects, a node being replaced)
PAUSE_S = 0.05  # before sending a redirected call again (the slot map is being updated)
REDIRECTS = (MovedError, TryAgainError, ClusterDownError)


class _Unsent(Exception):
    """A node's connection could not be made: nothing of its group was sent."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class ClusterScripts(Scripts):
    """:class:`Scripts` for a ``RedisCluster`` client: one round trip a pass, per node."""

    def run(self, call: Call[Any], client: Any = None, *, durable: bool = False,
            before: Sequence[tuple[Any, ...]] = ()) -> Any:
        reply = self.settle([call], durable=durable, before=before)[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def node_of(self, key: str) -> Any:
        """The cluster node (``redis.cluster.ClusterNode``) serving ``key``'s slot now."""
        return self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))

    def settle(self, calls: Sequence[Call[Any]], *, durable: bool = False,
               before: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        for command in before:  # the shared prefixes the calls refer to: each routed by its key
            self.client.execute_command(*command)
        raw: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        asks: dict[int, Any] = {}
        sent_to: dict[int, str] = {}  # call -> the node it was last sent to
        pause = 0.0
        waits: list[Any] = []  # WAIT's reply on each connection whose calls ran
        for _ in range(ATTEMPTS):
            if not todo:
                break
            if pause:
                time.sleep(pause)
            groups: dict[tuple[str, bool], tuple[Any, list[int]]] = {}
            for i in todo:
                asked = asks.pop(i, None)
                node = asked or self.node_of(calls[i].keys[0])
                sent_to[i] = node.name
                # An ASK redirection is for that call alone: ASKING goes before it, on its own group.
                groups.setdefault((node.name, asked is not None), (node, []))[1].append(i)
            replies = self._round(calls, groups, durable, waits)
            todo, refresh, unsent, pause = [], False, [], 0.0
            for i, reply in replies.items():
                raw[i] = reply
                if isinstance(reply, AskError) and not isinstance(reply, MovedError):
                    asks[i] = self._ask_target(reply)
                    todo.append(i)
                elif isinstance(reply, NoScriptError):
                    todo.append(i)  # loaded on its node by _round: again at once
                elif isinstance(reply, REDIRECTS):
                    refresh = True
                    pause = max(pause, PAUSE_S)
                    todo.append(i)
                elif isinstance(reply, _Unsent):
                    refresh = True
                    unsent.append(i)
                elif isinstance(reply, (redis.ConnectionError, redis.TimeoutError)):
                    refresh = True
            if refresh:
                self._refresh()
            # A node that refused the connection: again only if the slot map now names another
            # node for it (the failover is done); otherwise its shards wait for the next pass
            # rather than holding up the others' round trip.
            todo += [i for i in unsent if self.node_of(calls[i].keys[0]).name != sent_to[i]]
        for waited in waits:  # after every call that could run has run
            self.check_wait(waited)
        out: list[Any] = []
        for call, reply in zip(calls, raw, strict=True):
            if isinstance(reply, _Unsent):
                out.append(reply.cause)
            elif isinstance(reply, Exception):
                out.append(reply)
            else:
                out.append(call.parse(reply))
        return out

    def _ask_target(self, exc: AskError) -> Any:
        manager = self.client.nodes_manager
        node = manager.get_node(host=exc.host, port=exc.port)
        if node is None:
            from redis.cluster import ClusterNode

            make: Any = ClusterNode
            node = make(exc.host, exc.port)
        return node

    def _refresh(self) -> None:
        with contextlib.suppress(redis.RedisError):  # no node answered: the next pass tries again
            self.client.nodes_manager.initialize()

    def _round(self, calls: Sequence[Call[Any]], groups: dict[tuple[str, bool], tuple[Any, list[int]]],
               durable: bool, waits: list[Any]) -> dict[int, Any]:
        """Write every node's group, then read every reply: one round trip for all nodes."""
        replies: dict[int, Any] = {}
        # Per node: its pool, the connection, and what each reply is (a call's index; -1 for
        # ASKING's OK, -2 for WAIT's count).
        sent: list[tuple[Any, Any, list[int]]] = []
        for (_, asking), (node, indexes) in groups.items():
            pool = self.client.get_redis_connection(node).connection_pool
            try:
                conn = checkout(pool)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                for i in indexes:
                    replies[i] = _Unsent(exc)
                continue
            commands: list[tuple[Any, ...]] = []
            plan: list[int] = []
            for i in indexes:
                if asking:
                    commands.append(("ASKING",))
                    plan.append(-1)
                commands.append(("EVALSHA", *self._evalsha_args(calls[i])))
                plan.append(i)
            if durable and self.wait is not None:
                commands.append(("WAIT", *self.wait))
                plan.append(-2)
            try:
                conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                conn.disconnect()
                pool.release(conn)
                for i in indexes:
                    replies[i] = exc
                continue
            sent.append((pool, conn, plan))
        missing: dict[int, tuple[Any, set[str]]] = {}
        for pool, conn, plan in sent:
            lost: BaseException | None = None
            wait_reply: Any = None
            for what in plan:
                if lost is None:
                    try:
                        reply: Any = conn.read_response()
                    except redis.ResponseError as exc:
                        reply = exc
                    except (redis.ConnectionError, redis.TimeoutError) as exc:
                        conn.disconnect()
                        lost = exc
                if lost is not None:
                    reply = lost
                if what == -2:
                    wait_reply = reply
                elif what >= 0:
                    replies[what] = reply
                    if isinstance(reply, NoScriptError):
                        missing.setdefault(id(pool), (pool, set()))[1].add(calls[what].script)
            pool.release(conn)
            # WAIT counts for the writes of this connection; when none ran (every call was
            # redirected: this node is no longer the master, WAIT is refused there), it says nothing.
            ran = any(not isinstance(replies.get(i), Exception) for i in plan if i >= 0)
            if -2 in plan and lost is None and ran:
                waits.append(wait_reply)
        for pool, names in missing.values():
            loader = redis.Redis(connection_pool=pool)
            with contextlib.suppress(redis.RedisError):  # its node just went down: NOSCRIPT stays the reply
                for name in names:
                    loader.script_load(self._sources[name].text)
        return replies
