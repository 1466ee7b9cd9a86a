"""The confirms publisher's connection and confirm-mode channel, and the queues it declares.

The publisher owns its connection (``app.connection_for_write()``); a channel the broker closed is
noticed before the next batch is written (what it sent meanwhile is read first) and opened again.
A batch's queues are declared as Celery declares them, once per channel, and every other exchange
is checked to exist: a publish to a missing one would close the channel with the whole batch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kombu.entity import Exchange, Queue

from ...dispatch.handoff import Outgoing
from ...model.logs import log_event


class ConfirmChannel:
    """The connection and channel of :class:`~.amqp_confirms.ConfirmPublisher`, which hears the
    channel's confirms and returns (its handlers)."""

    _on_ack: Callable[[int, bool], None]
    _on_nack: Callable[[int, bool], None]
    _on_return: Callable[[Any, str, str, Any], None]

    def __init__(self, app: Any) -> None:
        self.app = app
        self._connection: Any = None
        self._channel: Any = None
        self._declared: set[str] = set()  # queues declared on the current channel
        self._exchanges: set[str] = set()  # exchanges known to exist on the current channel
        self._next_tag = 1

    @property
    def connection(self) -> Any:
        if self._connection is None:
            self._connection = self.app.connection_for_write()
        return self._connection

    def _open_channel(self) -> Any:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        conn = self.connection
        # One attempt per host: the dispatcher's backoff waits out an outage, heartbeats going on.
        conn.ensure_connection(max_retries=max(0, len(getattr(conn, "alt", ()) or ()) - 1))
        channel = conn.channel()
        channel.confirm_select()
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        channel.events["basic_return"].add(self._on_return)
        self._channel = channel
        self._declared, self._exchanges = set(), set()
        self._next_tag = 1  # a new channel numbers its publishes from 1
        return channel

    def _open_channel_alive(self) -> Any:
        """The channel, after reading what the broker sent since the last batch: a connection it
        closed meanwhile is noticed here, before anything is written, and replaced once."""
        channel = self._open_channel()
        try:
            self._drain_nowait()
        except Exception:
            self._forget_channel()
            channel = self._open_channel()
        return channel

    def _declare(self, channel: Any, batch: Sequence[Outgoing]) -> tuple[Any, set[str]]:
        """Declare the batch's queues as Celery would (its ``Queue``, or the one Celery creates for
        a missing queue), once per channel; a queue that exists with other arguments (declared by
        its owner) is used as it is. Then check that every other exchange exists: a publish to a
        missing one would make the broker close the channel, taking the whole batch with it.
        Returns the channel (a refusal closes it: it is opened again) and the missing exchanges."""
        for name in sorted({o.message.queue for o in batch if o.message.queue} - self._declared):
            queue = self.queue(name)
            try:
                queue(channel).declare()
            except self.connection.channel_errors as exc:
                log_event(logging.WARNING, "queue.declare_refused", queue=name, error=str(exc))
                channel = self._reopen()
            self._declared.add(name)
            if queue.exchange is not None and queue.exchange.name:
                self._exchanges.add(queue.exchange.name)
        missing: set[str] = set()
        for name in sorted({o.message.exchange for o in batch if o.message.exchange} - self._exchanges):
            try:
                channel.exchange_declare(exchange=name, type="direct", passive=True)
                self._exchanges.add(name)
            except self.connection.channel_errors as exc:
                if getattr(exc, "code", None) != 404:
                    raise
                missing.add(name)
                channel = self._reopen()
        return channel, missing

    def _reopen(self) -> Any:
        self._channel = None
        return self._open_channel()

    def queue(self, name: str) -> Any:
        found = self.app.amqp.queues.get(name)
        return found if found is not None else Queue(name, Exchange(name, type="direct"), name)

    def _forget_channel(self) -> None:
        """After a failure the channel (and maybe the connection) is unusable: the next batch
        connects again."""
        self._channel = None
        if self._connection is not None:
            with contextlib.suppress(Exception):  # a dead socket: nothing to release cleanly
                self._connection.collect()

    def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.release()
            self._connection = None

    def _drain_nowait(self) -> None:
        conn = self._channel.connection
        while True:
            try:
                conn.drain_events(timeout=0)
            except TimeoutError:
                return
