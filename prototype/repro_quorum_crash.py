# mypy: disallow-untyped-calls=False
"""Reproduction: confirmed messages of a just-declared quorum queue lost by a kill -9 of the node.

    PYTHONPATH=. python -m prototype.repro_quorum_crash

On RabbitMQ 3.10.8 (Ra 2.2.0, Debian 12's package) a queue killed within about a second of its
declaration may come back empty, under a new Raft data directory (the old one, with the messages,
is orphaned); one that had lived a few seconds, or had been through a clean restart, keeps every
confirmed message. Run it against a newer server (ZSET_RABBITMQ_SCRIPTS) to see whether it still happens.
"""

from __future__ import annotations

import threading
import time

from prototype.confirm_publisher import BatchResult, Outgoing
from prototype.tests.test_confirm_publisher import _publish_until_error, new_queue
from tests.support.rabbitmq import PrivateNode


def trial(node: PrivateNode, settle: float, threshold: int = 2000) -> None:
    queue = new_queue(node.url, "quorum")
    time.sleep(settle)
    sent: list[list[Outgoing]] = []
    results: list[BatchResult] = []
    started = time.monotonic()
    # Small batches, each confirmed before the next: confirmed messages pile up from the start.
    publishing = threading.Thread(target=_publish_until_error, args=(node.url, queue, sent, results, 200, 250),
                                  daemon=True)
    publishing.start()
    while node.message_count(queue.name) < threshold:
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
        for settle in (0.0, 0.0, 0.0, 0.5, 1.0, 3.0):
            trial(node, settle)
    finally:
        node.close()


if __name__ == "__main__":
    main()
