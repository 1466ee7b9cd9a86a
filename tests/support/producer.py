"""A producer thread for the failover tests: schedules with short countdowns at a steady pace, and
sends an attempt the store refused again with the same id until it is acknowledged (as an
application would)."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery_zset_scheduler.errors import StoreUnavailable


class Producer(threading.Thread):
    """Schedules ``count`` ``t.record`` tasks (countdowns of 0.5 to 2.4 s) ``pace`` seconds apart."""

    def __init__(self, app: Any, count: int, pace: float) -> None:
        super().__init__(daemon=True)
        self.app, self.count, self.pace = app, count, pace
        self.acked: list[str] = []
        self.acked_at: list[float] = []  # time.time() of each acknowledgement
        self.refused = 0
        self.attempts: dict[str, int] = {}  # ids sent more than once: how many times
        self.error: BaseException | None = None

    def run(self) -> None:
        record = self.app.tasks["t.record"]
        try:
            for i in range(self.count):
                task_id = f"task-{i}"
                deadline = time.monotonic() + 60
                while True:
                    try:
                        record.apply_async(kwargs={"tag": i}, countdown=0.5 + (i % 20) * 0.1, task_id=task_id)
                        break
                    except StoreUnavailable:
                        self.refused += 1
                        self.attempts[task_id] = self.attempts.get(task_id, 1) + 1
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                self.acked.append(task_id)
                self.acked_at.append(time.time())
                time.sleep(self.pace)
        except BaseException as exc:
            self.error = exc
