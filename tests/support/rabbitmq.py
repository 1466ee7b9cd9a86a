# mypy: disallow-untyped-calls=False
# (Kombu's API is only partly typed; calling it is allowed here, as in the package's Kombu modules.)
"""A private RabbitMQ for the tests: a node of their own, else a vhost of their own, else a skip.

What the suite gets (``ZSET_TEST_RABBITMQ=auto``, the default, tries them in this order):

``node``
    A RabbitMQ node started from the installed server's scripts on free loopback ports (AMQP, Erlang
    distribution and a private epmd), every file of it (mnesia, logs, config, enabled plugins, the
    Erlang cookie in a HOME of its own) in a temporary directory. A server already running on the
    machine is neither read nor touched. It is stopped by PID (``rabbitmqctl stop`` if that fails)
    and its directory removed. Quorum queues work on it, and so do the outage helpers
    (``stop_app``/``start_app``), which the shared-server mode refuses.
``vhost``
    A server already running here, managed with its ``rabbitmqctl``: the suite gets a vhost of its
    own (``zt-<random>``, all permissions for guest) and deletes it at the end.

Neither possible: the fixture skips and says why each failed. ``ZSET_TEST_RABBITMQ=node`` or
``vhost`` forces one mode (and skips if it fails), ``off`` skips.

From a conftest::

    from tests.support.rabbitmq import rabbitmq_fixture, rabbitmq_url_fixture

    rabbitmq = rabbitmq_fixture()          # session scope: a RabbitMQ handle
    rabbitmq_url = rabbitmq_url_fixture()  # amqp://guest:guest@127.0.0.1:<port>/<vhost>

``python -m tests.support.rabbitmq check`` starts and stops a node once (CI uses it to fail early
with the reason instead of skipping every broker test).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from kombu.connection import Connection

MODE_ENV = "ZSET_TEST_RABBITMQ"
MODES = ("auto", "node", "vhost", "off")
USER = PASSWORD = "guest"
# Debian's /usr/sbin/rabbitmq-server and rabbitmqctl are wrappers that switch to the rabbitmq user
# and its HOME (so the system node's cookie); the real scripts sit here. $ZSET_RABBITMQ_SCRIPTS
# names another directory (a generic unix tarball's sbin, say).
SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/bin")
# Environment that would point our node at the system's files or at another node.
_INHERITED_PREFIXES = ("RABBITMQ_", "ERL_", "ERLANG_")


class RabbitMQUnavailable(RuntimeError):
    """No private RabbitMQ can be had here; the message says why (used as the skip reason)."""


@dataclass(frozen=True)
class QueueInfo:
    """One queue as ``rabbitmqctl list_queues`` reports it."""

    name: str
    type: str
    messages: int
    consumers: int
    arguments: dict[str, Any] = field(default_factory=dict)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(avoid: set[int] | None = None) -> int:
    """A loopback TCP port nothing uses now (``avoid`` ports excluded).

    Picked below the kernel's ephemeral range: a node restarted after ``kill()`` binds the same
    port again, and meanwhile any outgoing connection on the machine could have been given an
    ephemeral port, which would then be taken.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(20000, low) if low > 21000 else random.randrange(low, 65536)
        if avoid and port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port")


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def amqp_url(port: int, vhost: str) -> str:
    # The vhost is the URL's path: "/" must be quoted ("%2F"), any other name is quoted the same way.
    return f"amqp://{USER}:{PASSWORD}@127.0.0.1:{port}/{quote(vhost, safe='')}"


def can_log_in(url: str, timeout: float = 2.0) -> bool:
    """True once the broker completes an AMQP handshake and opens the vhost."""
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    if not port_open(port):  # Kombu's connect() waits ~2 s before it reports a refused port
        return False
    conn = Connection(url, connect_timeout=timeout, transport_options={"max_retries": 0})
    try:
        conn.connect()
        return True
    except Exception:  # any refusal means "not yet": the caller bounds the wait
        return False
    finally:
        with contextlib.suppress(Exception):
            conn.release()


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    env.update(extra)
    return env


class RabbitMQ:
    """A broker the suite may use: a URL, ``rabbitmqctl`` on it, and helpers for tests."""

    own_node = False

    def __init__(self, *, port: int, vhost: str, node: str, ctl: list[str], ctl_env: dict[str, str]) -> None:
        self.port = port
        self.vhost = vhost
        self.node = node
        self._ctl = ctl
        self._ctl_env = ctl_env
        self._extra_vhosts: list[str] = []
        #: Seconds it took to get this broker ready (node start or vhost creation).
        self.ready_seconds = 0.0

    # -- addresses ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return amqp_url(self.port, self.vhost)

    def url_for(self, vhost: str) -> str:
        return amqp_url(self.port, vhost)

    def connection(self, **kwargs: Any) -> Any:
        """A Kombu connection to this broker's vhost (the caller releases it)."""
        return Connection(self.url, **kwargs)

    def describe(self) -> str:
        kind = "own node" if self.own_node else "vhost on a running server"
        return f"RabbitMQ {kind} {self.node} port {self.port} vhost {self.vhost!r}"

    # -- rabbitmqctl --------------------------------------------------------------------------
    def ctl(self, *args: str, timeout: float = 60.0, check: bool = True) -> str:
        """Run ``rabbitmqctl -n <node> -q <args>``; returns its stdout."""
        argv = [*self._ctl, "-n", self.node, "-q", *args]
        proc = subprocess.run(argv, env=self._ctl_env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed ({proc.returncode}): "
                               f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
        return proc.stdout

    def ctl_json(self, *args: str, timeout: float = 60.0) -> Any:
        out = self.ctl(*args, "--formatter", "json", timeout=timeout).strip()
        return json.loads(out) if out else []

    # -- what the broker holds ----------------------------------------------------------------
    def queues(self, vhost: str | None = None) -> list[QueueInfo]:
        """Every queue of the vhost (message counts as ``list_queues`` has them: see ``queue_info``)."""
        rows = self.ctl_json("list_queues", "-p", vhost or self.vhost,
                             "name", "type", "messages", "consumers", "arguments")
        return [_queue_info(row) for row in rows]

    def queue_info(self, name: str, vhost: str | None = None) -> QueueInfo | None:
        """Type, ready messages and consumers of one queue (None when it does not exist).

        The message count comes from a passive declare: ``list_queues`` reports a quorum queue's
        count from metrics refreshed every few seconds, so right after a publish it may say 0.
        """
        for q in self.queues(vhost):
            if q.name == name:
                return replace(q, messages=self.message_count(name, url=self.url_for(vhost or self.vhost)))
        return None

    def message_count(self, name: str, url: str | None = None) -> int:
        """Ready messages of a queue, read over AMQP (a passive declare: no CLI start-up cost)."""
        with Connection(url or self.url) as conn:
            _, count, _ = conn.default_channel.queue_declare(queue=name, passive=True)
            return int(count)

    def feature_flags(self) -> dict[str, str]:
        return {row["name"]: row["state"] for row in self.ctl_json("list_feature_flags", "name", "state")}

    def supports_quorum_queues(self) -> bool:
        return self.feature_flags().get("quorum_queue") == "enabled"

    # -- connections --------------------------------------------------------------------------
    def connections(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Client connections to the vhost: ``name``, ``peer_port`` (the client's port), ``user``."""
        rows = self.ctl_json("list_connections", "-p", vhost or self.vhost, "name", "peer_port", "user")
        return list(rows)

    def close_connections(self, reason: str = "closed by the test suite", vhost: str | None = None) -> None:
        """Force-close every client connection of the vhost (the clients see CONNECTION_FORCED)."""
        self.ctl("close_all_connections", "-p", vhost or self.vhost, reason)

    def close_connection_from(self, client_port: int, reason: str = "closed by the test suite") -> bool:
        """Force-close the one connection whose client side has local port ``client_port``."""
        # The table output, not JSON: the JSON formatter prints pids in a form close_connection rejects.
        for line in self.ctl("-s", "list_connections", "-p", self.vhost, "pid", "peer_port").splitlines():
            pid, _, port = line.partition("\t")
            if port.strip() == str(client_port):
                self.ctl("close_connection", pid.strip(), reason)
                return True
        return False

    def wait_for_connections(self, predicate: Callable[[int], bool], timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while True:
            n = len(self.connections())
            if predicate(n):
                return n
            if time.monotonic() > deadline:
                raise AssertionError(f"connection count {n} did not reach the expected value in {timeout}s")
            time.sleep(0.2)

    # -- outages (own node only) --------------------------------------------------------------
    def stop_app(self) -> None:
        """Stop the RabbitMQ application: every connection drops and connects are refused."""
        self._require_own_node("stop_app")
        self.ctl("stop_app")

    def start_app(self, timeout: float = 60.0) -> None:
        """Start it again and wait until the vhost accepts logins."""
        self._require_own_node("start_app")
        self.ctl("start_app", timeout=timeout)
        self.wait_ready(timeout)

    def _require_own_node(self, what: str) -> None:
        if not self.own_node:
            pytest.skip(f"{what} needs a private RabbitMQ node; this run uses a vhost on a shared server")

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not can_log_in(self.url):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.describe()} did not accept AMQP logins within {timeout}s")
            time.sleep(0.1)

    # -- vhosts -------------------------------------------------------------------------------
    def add_vhost(self) -> str:
        """A new empty vhost for guest, deleted by ``close()`` (or by ``delete_vhost``)."""
        name = f"zt-{secrets.token_hex(4)}"
        self._create_vhost(name)
        self._extra_vhosts.append(name)
        return name

    @contextlib.contextmanager
    def fresh_vhost(self) -> Iterator[str]:
        """A URL on a vhost of its own for one test (declarations made there vanish with it)."""
        name = self.add_vhost()
        try:
            yield self.url_for(name)
        finally:
            self.delete_vhost(name)

    def delete_vhost(self, name: str) -> None:
        self.ctl("delete_vhost", name, check=False)
        if name in self._extra_vhosts:
            self._extra_vhosts.remove(name)

    def _create_vhost(self, name: str) -> None:
        self.ctl("add_vhost", name)
        self.ctl("set_permissions", "-p", name, USER, ".*", ".*", ".*")

    def close(self) -> None:
        for name in list(self._extra_vhosts):
            self.delete_vhost(name)

    def __enter__(self) -> RabbitMQ:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _queue_info(row: dict[str, Any]) -> QueueInfo:
    args = row.get("arguments") or {}
    if isinstance(args, list):  # older CLIs print the table as [[key, type, value], ...]
        args = {a[0]: a[-1] for a in args if isinstance(a, list) and a}
    return QueueInfo(str(row["name"]), str(row.get("type", "classic")), int(row.get("messages") or 0),
                     int(row.get("consumers") or 0), dict(args))


# ---------------------------------------------------------------------------------------------
# Mode 1: a node of our own
# ---------------------------------------------------------------------------------------------

def find_scripts() -> Path:
    """The directory holding the real ``rabbitmq-server``/``rabbitmqctl`` scripts."""
    explicit = os.environ.get("ZSET_RABBITMQ_SCRIPTS")
    if explicit:
        candidates = [explicit]  # named on purpose: no silent fallback to another install
    else:
        candidates = list(SCRIPT_DIRS)
        on_path = shutil.which("rabbitmq-server")
        if on_path:
            # A generic install's sbin holds rabbitmq-env beside the server script; Debian's does not.
            candidates.append(str(Path(on_path).resolve().parent))
    for d in candidates:
        p = Path(d)
        if (p / "rabbitmq-server").is_file() and (p / "rabbitmqctl").is_file() and (p / "rabbitmq-env").is_file():
            return p
    raise RabbitMQUnavailable(
        "no rabbitmq-server scripts found (looked in " + ", ".join(candidates) + "): install Debian's "
        "rabbitmq-server package (apt-get install rabbitmq-server) or set ZSET_RABBITMQ_SCRIPTS"
    )


def find_epmd() -> str:
    found = shutil.which("epmd")
    if found:
        return found
    for p in sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd"), reverse=True):
        return str(p)
    raise RabbitMQUnavailable("no epmd (Erlang's port mapper) found: install erlang-base")


class PrivateNode(RabbitMQ):
    """A RabbitMQ node of the suite's own on free loopback ports, all files in a temporary directory."""

    own_node = True

    def __init__(self, *, base_dir: str | None = None) -> None:
        self.scripts = find_scripts()
        if shutil.which("erl") is None:
            raise RabbitMQUnavailable("no erl on PATH: RabbitMQ needs Erlang (Debian's erlang-base)")
        self.epmd_binary = find_epmd()
        amqp = free_port()
        dist = free_port({amqp})
        epmd = free_port({amqp, dist})
        self.dist_port, self.epmd_port = dist, epmd
        self._own_dir = base_dir is None
        self.dir = Path(base_dir or tempfile.mkdtemp(prefix="zt-rabbitmq-"))
        node = f"zt{amqp}@localhost"
        self.env = self._write_files(node, amqp)
        super().__init__(port=amqp, vhost="/", node=node, ctl=[str(self.scripts / "rabbitmqctl")],
                         ctl_env=self.env)
        self.process: subprocess.Popen[bytes] | None = None
        self.epmd: subprocess.Popen[bytes] | None = None
        self.process_rc: int | None = None
        #: Seconds from starting the scripts until the node accepted an AMQP login.
        self.start_seconds = 0.0

    def _write_files(self, node: str, amqp: int) -> dict[str, str]:
        d = self.dir
        home = d / "home"
        for sub in ("home", "mnesia", "log", "plugins-expand"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(20).upper())
        cookie.chmod(0o400)  # Erlang refuses a cookie file others can read
        # Only our listener: the system's rabbitmq.conf would bind its own AMQP port (5672).
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{amqp}\n"
            "log.file.level = info\n"
            "log.console = false\n"
        )
        (d / "enabled_plugins").write_text("")  # no plugins, in particular no management
        (d / "rabbitmq-env.conf").write_text("")  # instead of /etc/rabbitmq/rabbitmq-env.conf
        return _clean_env(
            HOME=str(home),
            RABBITMQ_NODENAME=node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(amqp),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_CONF_ENV_FILE=str(d / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
            RABBITMQ_PLUGINS_EXPAND_DIR=str(d / "plugins-expand"),
            RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
            RABBITMQ_LOG_BASE=str(d / "log"),
            RABBITMQ_PID_FILE=str(d / "node.pid"),
            # A port mapper of our own on a private port, so that no epmd outlives the suite and the
            # node registers with nobody else's.
            ERL_EPMD_ADDRESS="127.0.0.1",
            ERL_EPMD_PORT=str(self.epmd_port),
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )

    @property
    def log_file(self) -> Path:
        return self.dir / "log" / f"{self.node}.log"

    def log_tail(self, chars: int = 3000) -> str:
        parts = []
        for p in (self.dir / "server.out", self.log_file):
            if p.exists():
                parts.append(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def start(self, timeout: float = 120.0, attempts: int = 3) -> PrivateNode:
        t0 = time.monotonic()
        if self.epmd is None or self.epmd.poll() is not None:  # kept across kill() and start()
            self.epmd = subprocess.Popen(
                [self.epmd_binary, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        with open(self.dir / "server.out", "wb") as out:
            # Its own session: a Ctrl-C in the terminal reaches pytest, which then stops the node.
            self.process = subprocess.Popen(
                [str(self.scripts / "rabbitmq-server")], env=self.env, cwd=self.dir,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not can_log_in(self.url, timeout=1.0):
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.stop()
                if "eaddrinuse" in tail and attempts > 1:
                    # Someone took one of our ports in the instant it was free (a restart keeps them).
                    time.sleep(1.0)
                    return self.start(timeout, attempts=attempts - 1)
                raise RabbitMQUnavailable(f"the private node exited at start (code {self.process_rc}):\n{tail}")
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RabbitMQUnavailable(f"the private node did not accept AMQP within {timeout}s:\n{tail}")
            time.sleep(0.05)
        self.start_seconds = self.ready_seconds = time.monotonic() - t0
        return self

    def beam_pid(self) -> int | None:
        """The Erlang VM's PID (the script we start forwards signals to it)."""
        try:
            return int((self.dir / "node.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (RabbitMQ shuts down cleanly on it), ``rabbitmqctl stop`` if it hangs, then SIGKILL."""
        proc, self.process = self.process, None
        beam = self.beam_pid()
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.ctl("stop", timeout=timeout, check=False)
                    try:
                        proc.wait(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            self.process_rc = proc.returncode
        if beam is not None and _alive(beam):
            # The wrapper script is gone but the VM is not (killed wrapper): end the VM by its PID.
            with contextlib.suppress(ProcessLookupError):
                os.kill(beam, signal.SIGKILL)
            _wait_gone(beam, 10.0)
        epmd, self.epmd = self.epmd, None
        if epmd is not None and epmd.poll() is None:
            epmd.terminate()
            try:
                epmd.wait(timeout=10)
            except subprocess.TimeoutExpired:
                epmd.kill()
                epmd.wait()

    def kill(self) -> None:
        """``kill -9`` of the VM (a crash, not a shutdown); ``start()`` again brings it back."""
        beam = self.beam_pid()
        if beam is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(beam, signal.SIGKILL)
            _wait_gone(beam, 10.0)
        if self.process is not None:
            self.process.wait(timeout=10)
            self.process = None

    def close(self) -> None:
        # Extra vhosts vanish with the node's data directory: no rabbitmqctl round trips needed.
        self._extra_vhosts.clear()
        self.stop()
        if self._own_dir:
            for _ in range(20):
                shutil.rmtree(self.dir, ignore_errors=True)
                if not self.dir.exists():
                    break
                # A VM that failed to boot may still be finishing its crash dump in there.
                time.sleep(0.25)

    def __enter__(self) -> PrivateNode:
        return self.start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes (its parent will reap it).
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ---------------------------------------------------------------------------------------------
# Mode 2: a vhost of our own on a server that already runs
# ---------------------------------------------------------------------------------------------

class SharedServerVhost(RabbitMQ):
    """A vhost of the suite's own on a running server (managed with the system's ``rabbitmqctl``)."""

    own_node = False

    def __init__(self) -> None:
        ctl = shutil.which("rabbitmqctl")
        if ctl is None:
            raise RabbitMQUnavailable("no rabbitmqctl on PATH to reach a running server")
        # The system's wrapper finds the node's cookie itself (as root: it becomes the rabbitmq user).
        env = dict(os.environ)
        status = _run_json([ctl, "-q", "status", "--formatter", "json"], env)
        if status is None:
            raise RabbitMQUnavailable(
                "no running RabbitMQ server this user may manage (rabbitmqctl status failed: not running, "
                "or no permission to read its Erlang cookie)"
            )
        node = str(status.get("node") or _first_listener_node(status))
        port = _amqp_port(status)
        if port is None:
            raise RabbitMQUnavailable("the running RabbitMQ server has no loopback AMQP listener")
        super().__init__(port=port, vhost=f"zt-{secrets.token_hex(4)}", node=node, ctl=[ctl], ctl_env=env)

    def start(self) -> SharedServerVhost:
        t0 = time.monotonic()
        try:
            self._create_vhost(self.vhost)
        except RuntimeError as exc:
            self.ctl("delete_vhost", self.vhost, check=False)
            raise RabbitMQUnavailable(f"cannot create a vhost on the running server: {exc}") from exc
        self.wait_ready(30.0)
        self.ready_seconds = time.monotonic() - t0
        return self

    def close(self) -> None:
        super().close()
        self.ctl("delete_vhost", self.vhost, check=False)

    def __enter__(self) -> SharedServerVhost:
        return self.start()


def _run_json(argv: list[str], env: dict[str, str]) -> Any:
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return None


def _first_listener_node(status: dict[str, Any]) -> str:
    for listener in status.get("listeners") or []:
        if listener.get("node"):
            return str(listener["node"])
    return "rabbit@localhost"


def _amqp_port(status: dict[str, Any]) -> int | None:
    for listener in status.get("listeners") or []:
        if listener.get("protocol") == "amqp" and listener.get("interface") in ("127.0.0.1", "0.0.0.0", "::", "[::]"):
            return int(listener["port"])
    return None


# ---------------------------------------------------------------------------------------------
# Choosing, and the pytest fixtures
# ---------------------------------------------------------------------------------------------

def provide(mode: str | None = None) -> RabbitMQ:
    """A started private RabbitMQ, by ``mode`` (default ``$ZSET_TEST_RABBITMQ`` or ``auto``)."""
    mode = (mode or os.environ.get(MODE_ENV) or "auto").lower()
    if mode not in MODES:
        raise RabbitMQUnavailable(f"{MODE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "off":
        raise RabbitMQUnavailable(f"RabbitMQ tests disabled ({MODE_ENV}=off)")
    reasons = []
    if mode in ("auto", "node"):
        try:
            return PrivateNode().start()
        except (RabbitMQUnavailable, OSError) as exc:
            reasons.append(f"own node: {exc}")
    if mode in ("auto", "vhost"):
        try:
            return SharedServerVhost().start()
        except (RabbitMQUnavailable, OSError) as exc:
            reasons.append(f"vhost on a running server: {exc}")
    raise RabbitMQUnavailable("no private RabbitMQ for the tests. " + " | ".join(reasons))


def rabbitmq_fixture(*, scope: Any = "session", mode: str | None = None, name: str = "rabbitmq") -> Any:
    """A pytest fixture yielding a started :class:`RabbitMQ` (skips, with the reason, if none)."""

    @pytest.fixture(scope=scope, name=name)
    def _rabbitmq() -> Iterator[RabbitMQ]:
        try:
            broker = provide(mode)
        except RabbitMQUnavailable as exc:
            pytest.skip(str(exc))
        try:
            yield broker
        finally:
            broker.close()

    return _rabbitmq


def rabbitmq_url_fixture(*, broker: str = "rabbitmq", scope: Any = "session", name: str = "rabbitmq_url") -> Any:
    """A pytest fixture returning the ``amqp://`` URL of the ``broker`` fixture's vhost."""

    @pytest.fixture(scope=scope, name=name)
    def _rabbitmq_url(request: pytest.FixtureRequest) -> str:
        handle: RabbitMQ = request.getfixturevalue(broker)
        return handle.url

    return _rabbitmq_url


def main(argv: list[str]) -> int:
    """``check``: start a node (or a vhost) and stop it, printing the mode and how long it took."""
    if argv[:1] != ["check"]:
        print("usage: python -m tests.support.rabbitmq check", file=sys.stderr)
        return 2
    try:
        broker = provide()
    except RabbitMQUnavailable as exc:
        print(f"RabbitMQ for the tests: unavailable: {exc}", file=sys.stderr)
        return 1
    try:
        quorum = broker.supports_quorum_queues()
        print(f"RabbitMQ for the tests: {broker.describe()}, ready in {broker.ready_seconds:.1f}s, "
              f"quorum queues {'enabled' if quorum else 'NOT enabled'}")
        return 0 if quorum else 1
    finally:
        broker.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
