"""Worker memory with a backlog of waiting tasks: a real ``celery worker`` subprocess (prefork,
one child) with plain Celery ETA next to one with the plugin installed.

Plain Celery: the tasks are sent with ``countdown`` to the broker; the worker prefetches each one
(Celery raises its prefetch limit for every ETA task it holds) and keeps it in memory until due.
With the plugin: the same tasks wait in the store and the worker holds none. The figure is
``VmRSS`` (``/proc/<pid>/status``) of the worker's main process plus its children, once idle and
once the backlog is in place (plain: the queue is empty and Kombu's ``unacked`` hash holds them all).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .environment import BenchEnv
from .fastpath import load
from .scheduling import apply_async, bulk, far_future_calls
from .worker_proc import wait_until_ready, worker_process


def vm_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def tree_rss_kb(pid: int) -> int:
    return vm_rss_kb(pid) + sum(vm_rss_kb(c) for c in children(pid))


def worker_rss(env: BenchEnv, plugin: bool, backlog: int, say: Callable[[str], None],
               timeout: float = 900.0) -> dict[str, Any]:
    label = "plugin" if plugin else "plain Celery"
    client = env.broker_client
    assert client is not None
    try:
        with worker_process(env, plugin) as worker:
            say(f"{label} worker (pid {worker.pid}): waiting until it runs a probe task")
            wait_until_ready(env, worker)
            time.sleep(1.0)
            idle = tree_rss_kb(worker.pid)
            say(f"{label} worker idle: {idle / 1024:.0f} MB; {backlog:,} tasks with countdown=3600")
            started = time.monotonic()
            if plugin:
                bulk(env, backlog, far_future_calls(backlog))
            else:
                apply_async(env.plain, backlog, 3600)
                # plus the warm-up call apply_async makes: backlog + 1 held
                worker.wait_for(f"the worker to hold {backlog:,} ETA tasks",
                                _all_held_or_stalled(client, env.queue, backlog), timeout)
            time.sleep(2.0)  # let the worker settle (timers, prefetch bookkeeping)
            held = int(client.hlen("unacked"))
            left = int(client.llen(env.queue))
            rss = tree_rss_kb(worker.pid)
            result = {
                "worker": label, "backlog": backlog, "idle_rss_mb": round(idle / 1024, 1),
                "rss_mb": round(rss / 1024, 1),
                "per_waiting_task_b": round((rss - idle) * 1024 / max(held, 1), 1) if not plugin
                else round((rss - idle) * 1024 / backlog, 1),
                "held_by_worker": held, "left_in_queue": left,
                "processes": 1 + len(children(worker.pid)),
                "seconds_to_backlog": round(time.monotonic() - started, 1), "load": load(),
            }
            say(f"{label} worker with {backlog:,} waiting: {result['rss_mb']:,} MB "
                f"({result['per_waiting_task_b']:,} B a waiting task), holding {held:,}, {left:,} left in the queue")
            return result
    finally:
        client.delete("unacked", "unacked_index", "unacked_mutex")
        env.purge_queue()


def _all_held_or_stalled(client: Any, queue: str, backlog: int, stall_s: float = 30.0) -> Callable[[], bool]:
    """True once the worker holds the whole backlog, or has taken none for ``stall_s`` (a worker
    that stops prefetching is a figure too: ``left_in_queue``)."""
    seen = {"held": -1, "since": time.monotonic()}

    def check() -> bool:
        held = int(client.hlen("unacked"))
        if client.llen(queue) == 0 and held >= backlog:
            return True
        if held != seen["held"]:
            seen.update(held=held, since=time.monotonic())
        return time.monotonic() - seen["since"] > stall_s

    return check
