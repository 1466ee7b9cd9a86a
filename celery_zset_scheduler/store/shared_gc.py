"""Collecting the shared prefixes (:mod:`.shared`) no stored value refers to any more.

Each producer process writes one prefix per task and queue into every shard it schedules in, and
a process that restarts (a deploy, an autoscaled web pod) writes new ones: ``origin`` holds its
pid and host. Without collection they add up for good. A collection cycle of one shard (its
steps are ``collect_shared-8.lua``, one atomic script each, any process may run the next one):

1. **begin**: ``RENAME shared -> shared_old`` (O(1)); writers keep writing their prefixes into
   ``shared`` with ``HSETNX`` before every schedule call, as always.
2. **scan**: ``HSCAN`` every value of ``msg`` and ``moving_msg``, ``count`` at a time, and move the
   prefix each refers to back into ``shared`` from ``shared_old`` or ``shared_grave``.
3. **end**: delete ``shared_grave`` (what no value referred to in two scans), and rename
   ``shared_old`` (what none referred to in this one) to ``shared_grave``.

Readers (the claims, the fast path's builder, ``get`` and ``page``) look in ``shared``, then
``shared_old``, then ``shared_grave``, so every prefix a value refers to is readable throughout.
The first look at a shard only starts its clock, and two cycles begin at least ``period``
apart, so a value HSCAN missed (written while the scan ran)
is found by the next scan before its prefix is deleted, unless its writer's ``HSETNX`` ran more
than ``period`` before the value itself (only a producer stopped in the middle of one pipeline
for that long). While a reshard moves entries, the scan waits and starts over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import redis

from ..model.keys import KeySpace
from .client import is_cluster
from .scripts import Call, ScriptDef, Scripts

COLLECT = ScriptDef("collect_shared", ("shared", "shared_old", "shared_grave", "shared_gc", "msg", "moving_msg",
                                       "moving", "layout"))

#: Values one step scans (HSCAN's COUNT; a small hash is scanned whole): ~0.7 ms of Redis time
#: (docs/benchmarks.md), which no other client waits longer than.
STEP_VALUES = 500

Phase = Literal["wait", "begun", "scanned", "busy", "ended", "refused"]


@dataclass(frozen=True)
class Step:
    """What one step did. ``wait``: ``first`` ms until a cycle may begin; ``begun``: ``first``
    prefixes set aside; ``scanned``: ``first`` values scanned, ``second`` prefixes moved back;
    ``busy``: a reshard is moving entries; ``ended``: ``first`` prefixes deleted, ``second`` set
    aside until the next end; ``refused``: the server refuses ``INFO`` (an ACL), nothing done."""

    shard: int
    phase: Phase
    first: int = 0
    second: int = 0


def step_call(keys: KeySpace, shard: int, period_ms: int, count: int = STEP_VALUES) -> Call[Step]:
    """The next step of ``shard``'s collection."""
    if period_ms < 0 or count < 1:
        raise ValueError(f"a collection needs period_ms >= 0 and count >= 1, got {period_ms} and {count}")

    def parse(reply: Any) -> Step:
        phase, first, second = reply
        text = phase.decode() if isinstance(phase, bytes) else str(phase)
        return Step(shard, text, int(first), int(second))  # type: ignore[arg-type]

    return COLLECT.call(keys.shard(shard), (period_ms, count), parse)


def steps(scripts: Scripts, keys: KeySpace, shards: Sequence[int], period_ms: int,
          count: int = STEP_VALUES) -> list[Step | Exception]:
    """One step of each shard's collection, each call on its own: a pipeline of them would hold
    every other client of the server for all of them at once."""
    out: list[Step | Exception] = []
    clustered = is_cluster(scripts.client)
    for shard in shards:
        try:
            out.append(scripts.run(step_call(keys, shard, period_ms, count)))
        except redis.RedisError as exc:
            # This shard's own (a full store, its cluster node down): the others go on. A
            # standalone server that cannot be reached cannot take the next step either.
            if not (clustered or isinstance(exc, redis.ResponseError)):
                raise
            out.append(exc)
    return out


def collect(scripts: Scripts, keys: KeySpace, shard: int, period_ms: int, count: int = STEP_VALUES,
            *, max_steps: int = 1_000_000) -> list[Step]:
    """Run ``shard``'s collection until its cycle ends, must wait (a cycle ended by someone else
    meanwhile: the next may not begin yet), a reshard holds it up, or ``INFO`` is refused; every
    step taken."""
    done: list[Step] = []
    for _ in range(max_steps):
        result = scripts.run(step_call(keys, shard, period_ms, count))
        done.append(result)
        if result.phase in ("wait", "busy", "ended", "refused"):
            break
    return done


@dataclass(frozen=True)
class SharedUsage:
    """One shard's shared prefixes: in use (or written since the cycle began), set aside by the
    cycle under way, waiting to be deleted; whether a cycle is under way, and when the last one
    began (None: no collection has looked at the shard yet; the first look only starts its clock)."""

    shard: int
    live: int
    old: int
    grave: int
    collecting: bool
    last_begun_ms: int | None = None


def usage(client: Any, keys: KeySpace, shards: Sequence[int]) -> list[SharedUsage]:
    """Every given shard's :class:`SharedUsage` (O(1) reads, one round trip)."""
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        sk = keys.shard(shard)
        pipe.hlen(sk.shared)
        pipe.hlen(sk.shared_old)
        pipe.hlen(sk.shared_grave)
        pipe.hmget(sk.shared_gc, ["begun", "last"])
    replies = pipe.execute()
    found = []
    for i, shard in enumerate(shards):
        live, old, grave, (begun, last) = replies[4 * i: 4 * i + 4]
        found.append(SharedUsage(shard, int(live), int(old), int(grave), begun is not None,
                                 int(float(last)) if last is not None else None))
    return found
