"""What ``celery zset status`` and ``doctor`` show of a Redis Cluster: its state, each master
(slots, connected replicas, AOF, eviction policy) and the node serving each shard.

One round trip per master (its INFO sections), plus the slot map, which is re-read first so
that the view follows a failover.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import redis

from ..store.client import is_cluster
from ..store.pending import Store


@dataclass(frozen=True)
class MasterInfo:
    address: str  # host:port
    slots: int  # slots it serves
    replicas: int  # replicas connected to it now
    aof: bool
    maxmemory_policy: str
    shards: list[int] = field(default_factory=list)  # shards of the store in its slots
    error: str | None = None  # it could not be asked


@dataclass(frozen=True)
class ClusterView:
    state: str  # cluster_state of the node asked: ok | fail
    slots_ok: int  # slots served by a reachable master (16384 when all are covered)
    masters: list[MasterInfo]
    shard_nodes: dict[int, str]  # shard -> host:port of its master

    @property
    def covered(self) -> bool:
        return self.state == "ok" and self.slots_ok == 16384


def read_cluster(store: Store) -> ClusterView | None:
    """The cluster behind the store, or None for a standalone Redis."""
    client: Any = store.client
    if not is_cluster(client):
        return None
    with contextlib.suppress(redis.RedisError):  # a node down: the last slot map known
        client.nodes_manager.initialize()
    info = client.cluster_info()
    shard_nodes: dict[int, str] = {}
    for shard in range(store.shards):
        node = client.get_node_from_key(store.keys.shard(shard).due)
        shard_nodes[shard] = f"{node.host}:{node.port}"
    slots: dict[str, int] = {}
    for nodes in client.nodes_manager.slots_cache.values():
        if nodes:
            slots[nodes[0].name] = slots.get(nodes[0].name, 0) + 1
    masters = []
    for node in sorted(client.get_primaries(), key=lambda n: (n.host, n.port)):
        address = f"{node.host}:{node.port}"
        shards = [s for s, a in shard_nodes.items() if a == address]
        try:
            pipe = client.get_redis_connection(node).pipeline(transaction=False)
            pipe.info("replication")
            pipe.info("persistence")
            pipe.info("memory")
            replication, persistence, memory = pipe.execute()
        except redis.RedisError as exc:
            masters.append(MasterInfo(address, slots.get(node.name, 0), 0, False, "unknown", shards, str(exc)))
            continue
        replicas = sum(1 for k, v in replication.items()
                       if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")
        masters.append(MasterInfo(
            address, slots.get(node.name, 0), replicas, int(persistence.get("aof_enabled", 0)) == 1,
            str(memory.get("maxmemory_policy", "unknown")), shards,
        ))
    return ClusterView(str(info.get("cluster_state", "unknown")), int(info.get("cluster_slots_ok", 0)),
                       masters, shard_nodes)
