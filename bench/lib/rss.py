"""Worker memory with a backlog of waiting tasks: a real ``celery worker`` subprocess (prefork,
one child) with plain Celery ETA next to one with the plugin installed.

Plain Celery: the tasks are sent with ``countdown`` to the broker; the worker prefetches each one
(Celery raises its prefetch limit for every ETA task it holds) and keeps it in memory until due.
With the plugin: the same tasks wait in the store and the worker holds none. The figure is
``VmRSS`` (``/proc/<pid>/status``) of the worker's main process plus its children, once idle and
once the backlog is in place (plain: the queue is empty and Kombu's ``unacked`` hash holds them all).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .environment import BenchEnv
from .fastpath import load
from .scheduling import apply_async, bulk, far_future_calls

ROOT = Path(__file__).resolve().parents[2]


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


def _wait(what: str, done: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited ({proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def worker_rss(env: BenchEnv, plugin: bool, backlog: int, say: Callable[[str], None],
               timeout: float = 900.0) -> dict[str, Any]:
    label = "plugin" if plugin else "plain Celery"
    client = env.broker_client
    assert client is not None
    vars_ = {**os.environ, "ZBENCH_BROKER": env.broker_url, "ZBENCH_QUEUE": env.queue,
             "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if plugin:
        vars_.update(ZBENCH_STORE=env.store_url, ZBENCH_PREFIX=env.prefix, ZBENCH_SHARDS=str(env.shards))
    cmd = [sys.executable, "-m", "celery", "-A", "bench.lib.worker_app", "worker", "--pool", "prefork",
           "--concurrency", "1", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
           "--without-heartbeat", "-Q", env.queue]
    # The worker's log goes to a file: a pipe nobody reads would block the worker once it is full.
    log = tempfile.NamedTemporaryFile(prefix="zbench-worker-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=vars_, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        say(f"{label} worker (pid {proc.pid}): waiting until it runs a probe task")
        env.task(env.plain).apply_async((0, 0))
        _wait("the probe task", lambda: client.llen(env.queue) == 0 and client.hlen("unacked") == 0, 120, proc)
        time.sleep(1.0)
        idle = tree_rss_kb(proc.pid)
        say(f"{label} worker idle: {idle / 1024:.0f} MB; {backlog:,} tasks with countdown=3600")
        started = time.monotonic()
        if plugin:
            bulk(env, backlog, far_future_calls(backlog))
        else:
            apply_async(env.plain, backlog, 3600)
            # plus the warm-up call apply_async makes: backlog + 1 held
            _wait(f"the worker to hold {backlog:,} ETA tasks",
                  _all_held_or_stalled(client, env.queue, backlog), timeout, proc)
        time.sleep(2.0)  # let the worker settle (timers, prefetch bookkeeping)
        held = int(client.hlen("unacked"))
        left = int(client.llen(env.queue))
        rss = tree_rss_kb(proc.pid)
        result = {
            "worker": label, "backlog": backlog, "idle_rss_mb": round(idle / 1024, 1), "rss_mb": round(rss / 1024, 1),
            "per_waiting_task_b": round((rss - idle) * 1024 / max(held, 1), 1) if not plugin
            else round((rss - idle) * 1024 / backlog, 1),
            "held_by_worker": held, "left_in_queue": left,
            "processes": 1 + len(children(proc.pid)), "seconds_to_backlog": round(time.monotonic() - started, 1),
            "load": load(),
        }
        say(f"{label} worker with {backlog:,} waiting: {result['rss_mb']:,} MB "
            f"({result['per_waiting_task_b']:,} B a waiting task), holding {held:,}, {left:,} left in the queue")
        return result
    except RuntimeError as e:
        raise RuntimeError(f"{e}; the worker's log ends with: {Path(log.name).read_text()[-2000:]}") from None
    finally:
        # The whole session we started (main process and its pool children), by its group id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        client.delete("unacked", "unacked_index", "unacked_mutex")
        env.purge_queue()
        log.close()
        os.unlink(log.name)


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
