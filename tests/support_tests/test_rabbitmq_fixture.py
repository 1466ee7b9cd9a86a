# mypy: disallow-untyped-calls=False
# (Kombu's API is only partly typed; calling it is allowed here, as in the package's Kombu modules.)
"""The private RabbitMQ fixture itself: it starts, carries classic and quorum queues, cuts
connections so that clients notice, survives an app restart, and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kombu.connection import Connection
from kombu.entity import Exchange, Queue

from tests.support.rabbitmq import (
    PrivateNode,
    RabbitMQ,
    RabbitMQUnavailable,
    SharedServerVhost,
    port_open,
    provide,
)

QUEUE_TYPES = ("classic", "quorum")


def declare(conn: Connection, name: str, queue_type: str) -> Queue:
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name,
                  queue_arguments={"x-queue-type": queue_type})
    queue(conn.default_channel).declare()
    return queue


def test_url_names_the_private_vhost(rabbitmq: RabbitMQ, rabbitmq_url: str) -> None:
    assert rabbitmq_url == rabbitmq.url
    assert rabbitmq_url.startswith(f"amqp://guest:guest@127.0.0.1:{rabbitmq.port}/")
    if rabbitmq.own_node:
        assert rabbitmq.node.startswith(f"zt{rabbitmq.port}@")
        assert rabbitmq_url.endswith("/%2F")
    else:
        assert rabbitmq.vhost.startswith("zt-")
        assert rabbitmq_url.endswith(f"/{rabbitmq.vhost}")
    with Connection(rabbitmq_url) as conn:
        conn.connect()
        assert conn.connected


def test_quorum_queues_are_enabled(rabbitmq: RabbitMQ) -> None:
    assert rabbitmq.supports_quorum_queues()


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_publish_and_consume_on_each_queue_type(rabbitmq: RabbitMQ, queue_type: str) -> None:
    name = f"zt.{queue_type}.{uuid.uuid4().hex[:8]}"
    with Connection(rabbitmq.url, transport_options={"confirm_publish": True}) as conn:
        queue = declare(conn, name, queue_type)
        producer = conn.Producer()
        for i in range(3):
            producer.publish({"n": i}, exchange=queue.exchange, routing_key=name, serializer="json",
                             delivery_mode=2)
        info = rabbitmq.queue_info(name)
        assert info is not None
        assert (info.type, info.messages, info.arguments.get("x-queue-type")) == (queue_type, 3, queue_type)
        assert rabbitmq.message_count(name) == 3
        bound = queue(conn.default_channel)
        got = []
        for _ in range(3):
            message = bound.get(no_ack=False)
            assert message is not None
            got.append(message.decode()["n"])
            message.ack()
        assert got == [0, 1, 2]
        assert bound.get() is None
        assert rabbitmq.message_count(name) == 0
        bound.delete()


def test_a_cut_connection_is_seen_by_the_client(rabbitmq: RabbitMQ) -> None:
    with Connection(rabbitmq.url) as conn:
        conn.connect()
        rabbitmq.wait_for_connections(lambda n: n >= 1)
        rabbitmq.close_connections("cut by the test")
        with pytest.raises(conn.recoverable_connection_errors) as caught:
            conn.drain_events(timeout=10)
        assert "cut by the test" in str(caught.value)


def test_one_connection_is_cut_by_its_client_port(rabbitmq: RabbitMQ) -> None:
    with Connection(rabbitmq.url) as victim, Connection(rabbitmq.url) as bystander:
        victim.connect()
        bystander.connect()
        rabbitmq.wait_for_connections(lambda n: n >= 2)
        port = victim.connection.sock.getsockname()[1]
        assert rabbitmq.close_connection_from(port, "only this one")
        with pytest.raises(victim.recoverable_connection_errors):
            victim.drain_events(timeout=10)
        # The other connection still works.
        queue = declare(bystander, f"zt.bystander.{uuid.uuid4().hex[:8]}", "classic")
        queue(bystander.default_channel).delete()


def test_stop_app_and_start_app_make_an_outage(rabbitmq: RabbitMQ) -> None:
    name = f"zt.outage.{uuid.uuid4().hex[:8]}"
    with Connection(rabbitmq.url, transport_options={"confirm_publish": True}) as conn:
        queue = declare(conn, name, "quorum")
        conn.Producer().publish(b"kept", exchange=queue.exchange, routing_key=name, delivery_mode=2)
    rabbitmq.stop_app()  # skips on a shared server
    try:
        assert not port_open(rabbitmq.port)
    finally:
        rabbitmq.start_app()
    # A quorum queue's confirmed message survives the application restart.
    assert rabbitmq.message_count(name) == 1
    with Connection(rabbitmq.url) as conn:
        queue(conn.default_channel).delete()


def test_a_fresh_vhost_is_private_and_deleted(rabbitmq: RabbitMQ) -> None:
    with rabbitmq.fresh_vhost() as url:
        vhost = url.rsplit("/", 1)[1]
        with Connection(url) as conn:
            declare(conn, "zt.only-here", "classic")
        assert rabbitmq.queue_info("zt.only-here", vhost=vhost) is not None
        assert rabbitmq.queue_info("zt.only-here") is None
    assert vhost not in rabbitmq.ctl("list_vhosts", "name").split()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline or text in environ:
            found.append(int(proc.name))
    return found


def test_a_private_node_leaves_nothing_behind() -> None:
    try:
        node = PrivateNode()
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    node.start()
    beam, epmd = node.beam_pid(), node.epmd
    assert beam is not None and epmd is not None
    assert node.start_seconds < 60
    assert _processes_mentioning(str(node.dir))  # the node and its port mapper run from there
    node.close()
    assert not node.dir.exists()
    assert _processes_mentioning(str(node.dir)) == []
    assert not Path(f"/proc/{beam}").exists() or "Z" in Path(f"/proc/{beam}/stat").read_text().split()[2]
    assert epmd.poll() is not None
    assert not port_open(node.port)
    assert not port_open(node.dist_port)
    assert not port_open(node.epmd_port)


def test_a_shared_server_vhost_is_deleted_at_the_end() -> None:
    try:
        shared = SharedServerVhost().start()
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    vhost = shared.vhost
    try:
        assert vhost in shared.ctl("list_vhosts", "name").split()
        with Connection(shared.url) as conn:
            declare(conn, "zt.shared", "quorum" if shared.supports_quorum_queues() else "classic")
    finally:
        shared.close()
    assert vhost not in shared.ctl("list_vhosts", "name").split()


def test_no_server_scripts_is_a_clear_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZSET_RABBITMQ_SCRIPTS", str(tmp_path))
    with pytest.raises(RabbitMQUnavailable, match=r"no rabbitmq-server scripts found.*apt-get install rabbitmq-server"):
        provide("node")
    with pytest.raises(RabbitMQUnavailable, match="disabled"):
        provide("off")


def test_the_check_command_reports_the_mode() -> None:
    # What .ci/run calls before the suite: one start and stop, with the figure.
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.rabbitmq", "check"],
        capture_output=True, text=True, timeout=180, check=False,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    if proc.returncode != 0 and "unavailable" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    assert "ready in" in proc.stdout and "quorum queues enabled" in proc.stdout
