"""``celery zset status``: per-shard pending, in flight, lag, leader, epoch and rate; totals; the
shared prefixes and their collection."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from ...model.times import iso
from ...ops.status import StoreStatus, read_status
from ...store.shared_gc import SharedUsage
from .group import installation, store_of
from .options import common, compose, count_option, interval_option, watch_option
from .output import duration, number, relative, table

CLEAR = "\x1b[H\x1b[2J"


def status_json(status: StoreStatus, prefix: str) -> dict[str, Any]:
    now = status.now_ms
    live, old, grave = status.shared_totals
    shared = {u.shard: u for u in status.shared}
    return {
        "prefix": prefix,
        "shard_count": len(status.shards),
        "redis_time_ms": now,
        "redis_time": iso(now),
        "totals": {
            "pending": status.pending,
            "inflight": status.inflight,
            "oldest_due_ms": status.oldest_due_ms,
            "lag_seconds": status.lag_ms / 1000.0,
            "rate_per_second": status.rate,
        },
        "dead_letters": status.dead_letters,
        "stats": status.stats,
        "dispatchers": [
            {"id": d.id, "shards": d.shards, "member": d.member, "expires_ms": d.expires_ms}
            for d in status.dispatchers
        ],
        "shared_prefixes": {
            "in_use": live, "set_aside": old, "to_delete": grave,
            "collecting_shards": [u.shard for u in status.shared if u.collecting],
            "last_cycle_ms": max((u.last_begun_ms for u in status.shared if u.last_begun_ms is not None),
                                 default=None),
        },
        "periodic": {
            "entries": sum(c.entries for c in status.periodic),
            "scheduled": sum(c.scheduled for c in status.periodic),
            "next_run_ms": min((c.next_look_ms for c in status.periodic if c.next_look_ms is not None), default=None),
        },
        "cluster": None if status.cluster is None else {
            "state": status.cluster.state,
            "slots_ok": status.cluster.slots_ok,
            "masters": [
                {"address": m.address, "slots": m.slots, "replicas": m.replicas, "aof": m.aof,
                 "maxmemory_policy": m.maxmemory_policy, "shards": m.shards, "error": m.error}
                for m in status.cluster.masters
            ],
        },
        "shards": [
            {
                "shard": s.shard,
                "node": status.cluster.shard_nodes.get(s.shard) if status.cluster else None,
                "pending": s.pending,
                "inflight": s.inflight,
                "oldest_due_ms": s.oldest_due_ms,
                "lag_seconds": s.lag_ms(now) / 1000.0,
                "locked": s.locked,
                "leader": s.leader.member if s.leader else None,
                "epoch": s.epoch,
                "rate_per_second": s.leader.rate if s.leader else None,
                "dispatched": s.leader.dispatched if s.leader else None,
                "periodic_entries": p.entries,
                "periodic_scheduled": p.scheduled,
                "periodic_next_run_ms": p.next_look_ms,
                **_shard_shared(shared.get(s.shard)),
            }
            for s, p in zip(status.shards, status.periodic, strict=True)
        ],
    }


def _shard_shared(usage: SharedUsage | None) -> dict[str, Any]:
    if usage is None:
        return {"shared_in_use": None, "shared_set_aside": None, "shared_to_delete": None,
                "collecting": None, "last_cycle_ms": None}
    return {"shared_in_use": usage.live, "shared_set_aside": usage.old, "shared_to_delete": usage.grave,
            "collecting": usage.collecting, "last_cycle_ms": usage.last_begun_ms}


def status_text(status: StoreStatus, prefix: str, collect_interval: float | None = None) -> str:
    now = status.now_ms
    nodes = status.cluster.shard_nodes if status.cluster else None
    rows: list[tuple[Any, ...]] = []
    for s in status.shards:
        leader = s.leader.member if s.leader else ("(unannounced)" if s.locked else "-")
        rows.append((
            s.shard, number(s.pending), number(s.inflight), duration(s.lag_ms(now)),
            relative(s.oldest_due_ms, now), leader, s.epoch or "-", number(s.leader.rate) if s.leader else "-",
            *([nodes.get(s.shard, "?")] if nodes is not None else []),
        ))
    rows.append((
        "total", number(status.pending), number(status.inflight), duration(status.lag_ms),
        relative(status.oldest_due_ms, now), "", "", number(status.rate), *([""] if nodes is not None else []),
    ))
    headers = ["SHARD", "PENDING", "IN FLIGHT", "LAG", "OLDEST DUE", "LEADER", "EPOCH", "RATE/S"]
    lines = [
        f"store {prefix!r}: {number(len(status.shards))} shards, Redis time {iso(now)}",
        "",
        table([*headers, *(["NODE"] if nodes is not None else [])], rows, right=(0, 1, 2, 3, 6, 7)),
        "",
        f"dead letters: {number(status.dead_letters)}",
        *(f"{name.replace('_', ' ')}: {number(count)}" for name, count in status.stats.items()),
        shared_summary(status, collect_interval),
        f"dispatchers alive: {number(len(status.dispatchers))}",
    ]
    for d in status.dispatchers:
        led = ",".join(map(str, d.shards)) or "none"
        pinned = "" if d.member else " (pinned with --shards)"
        lines.append(f"  {d.id}: leads {led}{pinned}")
    lines += _periodic_lines(status)
    lines += _cluster_lines(status)
    return "\n".join(lines)


def shared_summary(status: StoreStatus, collect_interval: float | None) -> str:
    """The shared prefixes and where their collection is (``collect_interval``: this app's setting,
    which the dispatchers are assumed to share)."""
    live, old, grave = status.shared_totals
    line = f"shared prefixes: {number(live)} in use, {number(old)} set aside, {number(grave)} to delete"
    collecting = [u.shard for u in status.shared if u.collecting]
    if collecting:
        return f"{line}; a collection is under way on shards {','.join(map(str, collecting))}"
    if collect_interval == 0:
        return f"{line}; collection off (zset_scheduler_collect_interval = 0)"
    clocks = [u.last_begun_ms for u in status.shared if u.last_begun_ms is not None]
    if not clocks:
        return f"{line}; not collected yet (a shard's leader starts its clock)"
    if collect_interval is None:
        return f"{line}; last cycle {relative(max(clocks), status.now_ms)}"
    due = min(clocks) + int(collect_interval * 1000)
    return f"{line}; next cycle can begin {relative(due, status.now_ms) if due > status.now_ms else 'now'}"


def _cluster_lines(status: StoreStatus) -> list[str]:
    view = status.cluster
    if view is None:
        return []
    lines = [f"cluster: {view.state}, {number(view.slots_ok)} of 16,384 slots served, {len(view.masters)} masters"]
    for m in view.masters:
        shards = ",".join(map(str, m.shards)) or "none"
        if m.error:
            lines.append(f"  {m.address}: unreachable ({m.error}); shards {shards}")
            continue
        aof = "AOF on" if m.aof else "AOF off"
        lines.append(f"  {m.address}: {number(m.slots)} slots, {m.replicas} replicas, {aof}, shards {shards}")
    return lines


def _periodic_lines(status: StoreStatus) -> list[str]:
    """The periodic entries per shard and who fires them (the shard's leader)."""
    now = status.now_ms
    total = sum(c.entries for c in status.periodic)
    lines = [f"periodic entries: {number(total)} ({number(sum(c.scheduled for c in status.periodic))} scheduled)"]
    for counts, shard in zip(status.periodic, status.shards, strict=True):
        if counts.entries:
            leader = shard.leader.member if shard.leader else ("(unannounced)" if shard.locked else "no leader")
            when = relative(counts.next_look_ms, now)
            lines.append(f"  shard {counts.shard}: {number(counts.entries)}, next {when}, leader {leader}")
    return lines


@click.command()
@compose(common, watch_option, interval_option, count_option)
@click.pass_context
def status(ctx: click.Context, as_json: bool, watch: bool, interval: float, count: int) -> None:
    """Pending, in flight, lag, leader, epoch and dispatch rate of every shard."""
    store = store_of(ctx)
    prefix = store.keys.prefix
    refreshes = 0
    tty = sys.stdout.isatty()
    try:
        while True:
            snapshot = read_status(store)
            if as_json:  # with --watch: one compact document per line (JSON Lines)
                data = status_json(snapshot, prefix)
                click.echo(json.dumps(data, separators=(",", ":")) if watch else json.dumps(data, indent=2))
            else:
                text = status_text(snapshot, prefix, installation(ctx).settings.collect_interval)
                click.echo(f"{CLEAR}{text}" if watch and tty else text + ("\n" if watch else ""))
            refreshes += 1
            if not watch or (count and refreshes >= count):
                return
            time.sleep(interval)
    except KeyboardInterrupt:  # the way out of --watch
        if not watch:
            raise
