"""Publishing stored messages through Kombu, unchanged: same id, headers, routing and priority."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..codec import StoredMessage
from ..dispatcher import PublishReport

# Properties that Producer.publish takes as arguments of their own.
_ARGUMENT_PROPERTIES = ("delivery_mode", "priority")


class KombuPublisher:
    """Publishes with the app's producer pool and ``task_publish_retry_policy``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def publish(self, messages: Sequence[StoredMessage]) -> PublishReport:
        published = 0
        policy = self.app.conf.task_publish_retry_policy
        queues = self.app.amqp.queues
        try:
            with self.app.producer_or_acquire() as producer:
                for m in messages:
                    properties = dict(m.properties)
                    extra = {k: properties.pop(k) for k in _ARGUMENT_PROPERTIES if k in properties}
                    producer.publish(
                        m.body,
                        exchange=m.exchange,
                        routing_key=m.routing_key,
                        headers=dict(m.headers),
                        content_type=m.content_type,
                        content_encoding=m.content_encoding,
                        declare=[queues[m.queue]] if m.queue else None,
                        retry=True,
                        retry_policy=policy,
                        **extra,
                        **properties,
                    )
                    published += 1
        except Exception as exc:  # any broker failure: the dispatcher releases the rest
            return PublishReport(published, exc)
        return PublishReport(published)
