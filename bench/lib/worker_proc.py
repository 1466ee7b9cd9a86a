"""A real ``celery worker`` subprocess of ``bench.lib.worker_app`` on a benchmark env's queue.

Its log goes to a file (a pipe nobody reads would block the worker once full); the whole session
it started (main process and pool children) is killed by group id afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .environment import BenchEnv

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_for(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Poll ``done`` until true; a clear error (with the log's tail) if the worker exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited ({self.proc.returncode}) while waiting for {what}; "
                                   f"its log ends with: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                   f"the worker's log ends with: {self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


@contextlib.contextmanager
def worker_process(env: BenchEnv, plugin: bool, *, pool: str = "prefork", concurrency: int = 1,
                   extra: dict[str, str] | None = None) -> Iterator[WorkerProcess]:
    vars_ = {**os.environ, "ZBENCH_BROKER": env.broker_url, "ZBENCH_QUEUE": env.queue, **(extra or {}),
             "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if plugin:
        vars_.update(ZBENCH_STORE=env.store_url, ZBENCH_PREFIX=env.prefix, ZBENCH_SHARDS=str(env.shards))
    cmd = [sys.executable, "-m", "celery", "-A", "bench.lib.worker_app", "worker", "--pool", pool,
           "--concurrency", str(concurrency), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
           "--without-heartbeat", "-Q", env.queue]
    log = tempfile.NamedTemporaryFile(prefix="zbench-worker-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=vars_, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        yield WorkerProcess(proc, Path(log.name))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
        os.unlink(log.name)


def wait_until_ready(env: BenchEnv, worker: WorkerProcess, timeout: float = 120.0) -> None:
    """Send one plain ``add`` and wait until the worker has taken and acknowledged it."""
    client = env.broker_client
    assert client is not None, "the benchmark worker needs a Redis broker"
    env.task(env.plain).apply_async((0, 0))
    worker.wait_for("the probe task", lambda: client.llen(env.queue) == 0 and client.hlen("unacked") == 0, timeout)
