"""The table of the claim that builds envelopes (``claim_built``), from the app's Kombu setup.

Used when the broker is Kombu's Redis transport (base64 bodies) but the fast path cannot push
into it (another server or database, or a Redis Cluster store). The table names, for every queue
the app declares that Kombu would not expire, the list of each priority step (``_q_for_pri``,
without ``global_keyprefix``: the publisher's transaction adds it). It names no exchange: their
bindings live on the broker, where the script cannot read them, so a message routed through an
exchange takes the Python path, as does one for a queue the table does not name. The queues are
declared first, as the publisher does before publishing.
"""

from __future__ import annotations

import json
from typing import Any

from ...store.built import BuiltTable
from .fast_routes import Decided, declared_queues, redis_channel


class BuiltRoutes(Decided[BuiltTable]):
    """A :data:`~...dispatch.built.TableSource`: the table, or None for the plain generic claim."""

    event = "built_envelopes"

    def __init__(self, app: Any, accept: set[str]) -> None:
        super().__init__()
        self.app = app
        self.accept = sorted(accept)

    def _build(self) -> BuiltTable | None:
        with self.app.producer_or_acquire() as producer:
            channel, self.why = redis_channel(producer)
            if channel is None:
                return None
            return built_table(channel, producer, declared_queues(self.app, producer), self.accept)


def built_table(channel: Any, producer: Any, queues: list[Any], accept: list[str]) -> BuiltTable:
    steps = list(channel.priority_steps)
    lists: list[str] = []
    numbers: dict[str, list[int]] = {}
    for queue in queues:
        if queue.name not in numbers:
            numbers[queue.name] = []
            for step in steps:
                lists.append(channel._q_for_pri(queue.name, step))
                numbers[queue.name].append(len(lists))
    mode = producer._delivery_details("", None)[1]
    data = {"accept": accept, "steps": steps, "queues": numbers, "exchanges": {}, "mode": mode}
    return BuiltTable(json.dumps(data), tuple(lists))
