"""Running real dispatcher and worker processes for crash tests, and reading their logs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from celery_zset_scheduler.testing import RedisServer

from .helpers import BACKEND_DB, BROKER_DB, RECORD_DB, STORE_DB, wait_for

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository
CELERY = str(Path(sys.executable).with_name("celery"))


class Proc:
    """A subprocess whose combined output is collected in the background."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="zset-proc-", suffix=".log")[1])
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self.pid = self.popen.pid

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_output(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            if self.popen.poll() is not None and not re.search(pattern, self.output):
                raise AssertionError(
                    f"process exited ({self.popen.returncode}) before {pattern!r}:\n{self.output[-3000:]}"
                )
            return re.search(pattern, self.output)

        return wait_for(found, timeout=timeout, what=f"{pattern!r} in the output")  # type: ignore[no-any-return]

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()
        return self.popen.returncode

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


class Cluster:
    """Env and process management for one test: store, broker, records on given servers."""

    def __init__(self, broker_server: RedisServer, store_server: RedisServer | None = None, *,
                 shards: int = 4, conf: dict[str, Any] | None = None, prefix: str = "zt",
                 store_url: str | None = None, broker_url: str | None = None) -> None:
        store_server = store_server or broker_server
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "ZSET_TEST_BROKER": broker_url or broker_server.url_db(BROKER_DB),
            "ZSET_TEST_BACKEND": broker_server.url_db(BACKEND_DB),
            # "": no store URL, the store is the broker's (its Redis, or its Sentinel master)
            "ZSET_TEST_STORE": store_server.url_db(STORE_DB) if store_url is None else store_url,
            "ZSET_TEST_RECORDS": broker_server.url_db(RECORD_DB),
            "ZSET_TEST_SHARDS": str(shards),
            "ZSET_TEST_PREFIX": prefix,
            "ZSET_TEST_CONF": json.dumps(conf or {}),
        }
        self.procs: list[Proc] = []
        self._lock = threading.Lock()

    def spawn(self, args: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(args, {**self.env, **(env or {})})
        with self._lock:
            self.procs.append(proc)
        return proc

    def dispatcher(self, *extra: str) -> Proc:
        return self.spawn([CELERY, "-A", "tests.support.proc_app", "zset", "run", "--loglevel", "INFO", *extra])

    def hooked_dispatcher(self, point: str) -> Proc:
        return self.spawn([sys.executable, "-m", "tests.support.proc_dispatcher", point])

    def worker(self, *extra: str, conf: dict[str, Any] | None = None) -> Proc:
        """``conf``: settings of this worker's app on top of the others'."""
        env = {"ZSET_TEST_CONF": json.dumps({**json.loads(self.env["ZSET_TEST_CONF"]), **conf})} if conf else None
        return self.spawn([CELERY, "-A", "tests.support.proc_app", "worker", "--pool", "solo", "--loglevel", "WARNING",
                           "--without-gossip", "--without-mingle", "--without-heartbeat", *extra], env)

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.log_path.unlink(missing_ok=True)


def leader_events(output: str) -> list[tuple[str, int, int]]:
    """``(event, shard, epoch)`` for each leadership line a dispatcher logged, in order."""
    pattern = r"zset leader\.(acquired|released|lost) shard=(\d+) epoch=(\d+)"
    return [(m[0], int(m[1]), int(m[2])) for m in re.findall(pattern, output)]


def owned_shards(output: str) -> set[int]:
    owned: set[int] = set()
    for event, shard, _ in leader_events(output):
        if event == "acquired":
            owned.add(shard)
        else:
            owned.discard(shard)
    return owned


def sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.monotonic()))
