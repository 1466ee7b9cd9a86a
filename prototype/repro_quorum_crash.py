# mypy: disallow-untyped-calls=False
"""Reproduction: confirmed messages of a just-declared quorum queue lost by a kill -9 of the node.

    PYTHONPATH=. python -m prototype.repro_quorum_crash

On RabbitMQ 3.10.8 (Ra 2.2.0, Debian 12's package) the queue killed ~1 s after its declaration
comes back empty, under a new Raft data directory (the old one, with the messages, is orphaned);
one that had lived a few seconds, or had been through a clean restart, keeps every confirmed
message. Run it against a newer server (ZSET_RABBITMQ_SCRIPTS) to see whether it still happens.
"""

from __future__ import annotations

import threading
import time

from prototype.confirm_publisher import BatchResult, Outgoing
from prototype.tests.test_confirm_publisher import _publish_until_error, new_queue
from tests.support.rabbitmq import PrivateNode


def trial(node: PrivateNode, settle: float) -> None:
    queue = new_queue(node.url, "quorum")
    time.sleep(settle)
    sent: list[list[Outgoing]] = []
    results: list[BatchResult] = []
    started = time.monotonic()
    publishing = threading.Thread(target=_publish_until_error, args=(node.url, queue, sent, results), daemon=True)
    publishing.start()
    while node.message_count(queue.name) < 5000:
        time.sleep(0.05)
    age = settle + time.monotonic() - started
    node.kill()
    publishing.join(120)
    confirmed = sum(len(r.confirmed) for r in results)
    node.start()
    time.sleep(1)
    print(f"queue {age:.1f}s old at kill -9: {confirmed} confirmed, {node.message_count(queue.name)} "
          "in the queue after the restart", flush=True)


def main() -> None:
    node = PrivateNode().start()
    try:
        for settle in (0.0, 3.0):
            trial(node, settle)
    finally:
        node.close()


if __name__ == "__main__":
    main()
