"""``celery -A proj beat -S zset``: Celery beat running a dispatcher.

The dispatcher runs in a thread of its own, so beat's loop and signal handling stay Celery's:
SIGTERM makes beat close the scheduler, which stops the dispatcher after the batch in hand and
releases its leases. ``beat_schedule`` entries are run by the process that leads shard 0 only,
so any number of these processes run each periodic entry once (the lease moves on a crash).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from celery.beat import Scheduler

from ..dispatch.loop import Dispatcher
from ..model.logs import log_event
from .dispatcher import build_dispatcher


class ZSetScheduler(Scheduler):
    """A beat scheduler whose real work is the zset dispatcher."""

    #: beat sleeps at most this long between ticks (periodic entries are checked each tick)
    tick_interval = 1.0

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.dispatcher: Dispatcher | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._led_periodic = False
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        super().setup_schedule()
        self.dispatcher = build_dispatcher(self.app)
        self._thread = threading.Thread(target=self._run, name="zset-dispatcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.dispatcher is not None
        try:
            self.dispatcher.run()
        except BaseException as exc:  # surfaced by tick() so beat exits with the reason
            self._error = exc
            raise

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self._error is not None:
            raise SystemExit(f"zset dispatcher stopped: {self._error!r}")
        dispatcher = self.dispatcher
        lease = dispatcher.leadership.lease(0) if dispatcher is not None else None
        # A lease not renewed lately (Redis trouble, a stalled loop) may already be someone
        # else's: periodic entries wait until it is renewed again.
        leads = lease is not None and dispatcher is not None and lease.valid(
            time.monotonic(), dispatcher.config.lock_timeout
        )
        if leads and not self._led_periodic:
            # A new leader starts periodic entries from now, not from a stale heap.
            self.setup_periodic()
        self._led_periodic = leads
        if leads and self.schedule:
            return float(min(super().tick(*args, **kwargs), self.tick_interval))
        return self.tick_interval

    def setup_periodic(self) -> None:
        self.data: dict[str, Any] = {}
        self.install_default_entries(self.data)
        self.merge_inplace(self.app.conf.beat_schedule)
        self._heap = None
        log_event(logging.INFO, "periodic.leader", entries=len(self.data))

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)
        super().close()

    @property
    def info(self) -> str:
        member = self.dispatcher.member_id if self.dispatcher else "-"
        return f"    . zset dispatcher -> {member}"
