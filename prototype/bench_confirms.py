# mypy: disallow-untyped-calls=False, disallow-untyped-decorators=False
# (Celery, Kombu and py-amqp are untyped or partly typed; calling them is allowed here.)
"""Benchmark: publishing Celery task messages into RabbitMQ, with and without publisher confirms.

    PYTHONPATH=. python -m prototype.bench_confirms --counts 10000 50000 --queue-types classic quorum

Starts a private RabbitMQ node (tests/support/rabbitmq.py) unless ``--url`` names a broker. Every
mode publishes the same kind of message, a protocol-2 Celery task message with a ~500-byte JSON
body, persistent (delivery_mode 2, Celery's default), into one durable queue of the given type;
after each run the queue must hold exactly the messages published, then it is purged.

Modes:

``batched``      ConfirmPublisher, batches of ``--batch`` messages (a dispatcher's batch), each
                 batch written whole and its confirms awaited (``multiple`` acks settle many);
                 frames of many messages coalesced into one write
``batched-plain`` the same with one py-amqp ``basic_publish`` (one sendall) a message
``per-message``  ConfirmPublisher with window 1: publish, wait for its ack, next
``kombu-confirm`` Kombu's own ``confirm_publish=True`` transport option, Producer.publish a message
``apply-async``  plain Celery: ``task.apply_async(args)`` with the app's producer pool, no confirms
``no-confirm``   the same raw basic.publish as ``batched`` without confirm mode (the ceiling)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from kombu.serialization import dumps

from prototype.confirm_publisher import ConfirmPublisher, Outgoing
from tests.support.rabbitmq import PrivateNode

TASK = "bench.noop"
MODES = ("batched", "batched-plain", "per-message", "kombu-confirm", "apply-async", "no-confirm")
# The task's one argument: with Celery's envelope around it the JSON body is ~500 bytes.
PAYLOAD = "x" * 420


def make_app(url: str, queue: Queue) -> Celery:
    app = Celery("bench", broker=url, set_as_current=False)
    app.conf.update(task_queues=[queue], task_default_queue=queue.name, task_ignore_result=True,
                    result_backend=None, broker_connection_retry_on_startup=True)

    @app.task(name=TASK, shared=False)
    def noop(payload: str) -> None:
        return None

    return app


def celery_messages(app: Celery, queue: Queue, n: int) -> list[Outgoing]:
    """``n`` messages exactly as ``apply_async`` builds them, each with its own task id."""
    template = app.amqp.create_task_message(str(uuid.uuid4()), TASK, (PAYLOAD,), {}, reply_to=str(uuid.uuid4()))
    headers, properties, body, _ = template
    content_type, content_encoding, data = dumps(body, serializer="json")
    data = data.encode(content_encoding) if isinstance(data, str) else data
    out = []
    for _ in range(n):
        task_id = str(uuid.uuid4())
        h = {**headers, "id": task_id, "root_id": task_id}
        p = {**properties, "correlation_id": task_id, "delivery_mode": 2, "priority": 0}
        out.append(Outgoing(data, h, "", queue.name, content_type, content_encoding, p))
    return out


def run_batched(url: str, msgs: list[Outgoing], batch: int, window: int, coalesce: bool = True) -> dict[str, Any]:
    with ConfirmPublisher(Connection(url), window=window, coalesce=coalesce) as pub:
        pub.channel  # connect and confirm_select before the clock starts  # noqa: B018
        frames = confirmed = 0
        t0 = time.perf_counter()
        for start in range(0, len(msgs), batch):
            r = pub.publish(msgs[start:start + batch])
            if r.error is not None or len(r.confirmed) != r.size:
                raise RuntimeError(f"batch failed: {r.error!r}")
            confirmed += len(r.confirmed)
            frames += r.ack_frames
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, "confirmed": confirmed, "ack_frames": frames}


def run_kombu_confirm(url: str, msgs: list[Outgoing]) -> dict[str, Any]:
    with Connection(url, transport_options={"confirm_publish": True}) as conn:
        producer = conn.Producer(auto_declare=False)
        conn.default_channel  # noqa: B018
        t0 = time.perf_counter()
        for m in msgs:
            extra = {k: v for k, v in m.properties.items() if k not in ("delivery_mode", "priority")}
            producer.publish(m.body, exchange=m.exchange, routing_key=m.routing_key, headers=m.headers,
                             content_type=m.content_type, content_encoding=m.content_encoding,
                             delivery_mode=2, priority=0, retry=False, **extra)
        return {"seconds": time.perf_counter() - t0}


def run_no_confirm(url: str, msgs: list[Outgoing]) -> dict[str, Any]:
    with Connection(url) as conn:
        channel = conn.channel()
        t0 = time.perf_counter()
        for m in msgs:
            extra = {k: v for k, v in m.properties.items() if k != "priority"}
            channel.basic_publish(channel.prepare_message(m.body, 0, m.content_type, m.content_encoding, m.headers,
                                                          extra), exchange=m.exchange, routing_key=m.routing_key)
        # Not a confirm: one round trip so that every publish before it has reached the broker.
        channel.basic_qos(0, 1, False)
        return {"seconds": time.perf_counter() - t0}


def run_apply_async(app: Celery, n: int) -> dict[str, Any]:
    task = app.tasks[TASK]
    with app.producer_or_acquire() as producer:  # warm the pool: connect, declare the queue
        producer.connection.default_channel  # noqa: B018
    task.apply_async((PAYLOAD,))
    n -= 1
    t0 = time.perf_counter()
    for _ in range(n):
        task.apply_async((PAYLOAD,))
    with app.producer_or_acquire() as producer:
        producer.channel.basic_qos(0, 1, False)  # all writes reached the broker
    return {"seconds": time.perf_counter() - t0, "count": n + 1}


def wait_count(count: Callable[[], int], expected: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        got = count()
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a process (the broker's Erlang VM), from /proc."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(url: str, counts: list[int], queue_types: list[str], modes: list[str], batch: int,
          window: int, per_message_max: int, repeat: int = 1, server_pid: int | None = None) -> list[dict[str, Any]]:
    rows = []
    for qtype in queue_types:
        name = f"bench.{qtype}"
        arguments: dict[str, Any] = {"x-queue-type": qtype.split("-")[0]}
        if qtype == "classic-v2":  # RabbitMQ >= 3.10's second classic queue storage
            arguments["x-queue-version"] = 2
        queue = Queue(name, Exchange(name, type="direct"), routing_key=name, queue_arguments=arguments)
        app = make_app(url, queue)
        with Connection(url) as admin:
            bound = queue(admin.default_channel)
            bound.declare()
            # Warm-up: the queue's first messages pay for its files and processes.
            run_batched(url, celery_messages(app, queue, 2000), batch, window)
            for n in counts:
                msgs = celery_messages(app, queue, n)
                for mode in [m for m in modes for _ in range(repeat)]:
                    if mode in ("per-message", "kombu-confirm") and n > per_message_max:
                        continue
                    bound.purge()
                    client0, server0, load = time.process_time(), cpu_seconds(server_pid), os.getloadavg()[0]
                    if mode == "batched":
                        out = run_batched(url, msgs, batch, window)
                    elif mode == "batched-plain":
                        out = run_batched(url, msgs, batch, window, coalesce=False)
                    elif mode == "per-message":
                        out = run_batched(url, msgs, batch, 1)
                    elif mode == "kombu-confirm":
                        out = run_kombu_confirm(url, msgs)
                    elif mode == "no-confirm":
                        out = run_no_confirm(url, msgs)
                    else:
                        out = run_apply_async(app, n)

                    def ready(bound: Any = bound) -> int:
                        return int(bound.queue_declare(passive=True).message_count)

                    in_queue = wait_count(ready, n)
                    client_cpu = time.process_time() - client0
                    server_cpu = cpu_seconds(server_pid) - server0
                    row = {"queue_type": qtype, "messages": n, "mode": mode, "seconds": round(out["seconds"], 3),
                           "msgs_per_s": round(n / out["seconds"]), "in_queue": in_queue,
                           "ack_frames": out.get("ack_frames"),
                           "client_cpu_us_per_msg": round(client_cpu / n * 1e6, 1),
                           "server_cpu_us_per_msg": round(server_cpu / n * 1e6, 1) if server_pid else None,
                           "load_before": round(load, 2)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if in_queue != n:
                        raise RuntimeError(f"{mode}: {in_queue} messages in the queue, {n} published")
            bound.purge()
            bound.delete()
        app.close()
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="broker URL (default: start a private node)")
    parser.add_argument("--counts", type=int, nargs="+", default=[10000, 50000])
    parser.add_argument("--queue-types", nargs="+", default=["classic", "quorum"],
                        choices=["classic", "classic-v2", "quorum"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--batch", type=int, default=1000, help="messages per publish() call (batched)")
    parser.add_argument("--window", type=int, default=5000, help="max unconfirmed messages in flight")
    parser.add_argument("--per-message-max", type=int, default=50000,
                        help="skip the one-round-trip modes above this many messages")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    node = None
    url = args.url
    if url is None:
        node = PrivateNode().start()
        url = node.url
        print(f"# private node {node.node} started in {node.start_seconds:.1f}s", flush=True)
    try:
        rows = bench(url, args.counts, args.queue_types, args.modes, args.batch, args.window, args.per_message_max,
                     args.repeat, node.beam_pid() if node is not None else None)
    finally:
        if node is not None:
            node.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print()
    print(f"{'queue':8} {'messages':>9} {'mode':14} {'seconds':>8} {'msgs/s':>8} {'client us':>9} "
          f"{'server us':>9} {'load':>5}")
    for r in rows:
        print(f"{r['queue_type']:8} {r['messages']:>9} {r['mode']:14} {r['seconds']:>8} {r['msgs_per_s']:>8} "
              f"{r['client_cpu_us_per_msg']:>9} {r['server_cpu_us_per_msg'] or '-':>9} {r['load_before']:>5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
