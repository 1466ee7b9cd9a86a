"""``celery -A proj beat -S zset``: Celery beat running a dispatcher.

Beat's own scheduler (an in-memory heap of ``beat_schedule``) is not used: the dispatcher runs the
periodic entries from the store, on the leader of each entry's shard, after syncing
``beat_schedule`` into it (:mod:`..periodic.config`). Any number of these processes run each
occurrence once, through crashes and leader changes (I11).

The dispatcher runs in a thread of its own, so beat's loop and signal handling stay Celery's:
SIGTERM makes beat close the scheduler, which stops the dispatcher after the batch in hand and
releases its leases. A configuration error (a misspelt setting, a bad ``beat_schedule`` entry, a
shard-count mismatch) ends beat with one ``Error: ...`` line and exit status 1, as ``celery zset
run`` does, instead of Celery's logged traceback.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, NoReturn

from celery.beat import Scheduler

from ...dispatch.leadership import new_member_id
from ...dispatch.loop import Dispatcher
from ...errors import ZSetSchedulerError
from ...store.periodic import PeriodicStore
from ...store.snapshot import read_shards
from ..core.state import ensure_installation
from ..periodic.entries import config_entries
from .build import build_dispatcher

_member: tuple[int, str] | None = None


def _exit(message: str) -> NoReturn:
    """One ``Error:`` line on the real stderr (beat may have redirected ``sys.stderr`` to its log),
    exit status 1; SystemExit passes beat's handlers, which would log a traceback of anything else."""
    print("Error: " + " ".join(message.split()), file=sys.__stderr__, flush=True)
    raise SystemExit(1)


def process_member_id() -> str:
    """This process's dispatcher id: beat's banner (a scheduler made just for it) and the dispatcher
    started afterwards show the same one."""
    global _member
    if _member is None or _member[0] != os.getpid():
        _member = (os.getpid(), new_member_id())
    return _member[1]


class ZSetScheduler(Scheduler):
    """A beat scheduler whose real work is the zset dispatcher."""

    #: how often beat's loop looks at the dispatcher thread
    tick_interval = 1.0

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.dispatcher: Dispatcher | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        try:
            ensure_installation(app).settings  # noqa: B018 (validates every zset_scheduler_* setting)
            self._configured = len(config_entries(app))
        except ZSetSchedulerError as exc:
            _exit(str(exc))
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        try:
            self.dispatcher = build_dispatcher(self.app, member_id=process_member_id())
        except ZSetSchedulerError as exc:
            _exit(str(exc))
        self._thread = threading.Thread(target=self._run, name="zset-dispatcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.dispatcher is not None
        try:
            self.dispatcher.run()
        except BaseException as exc:  # surfaced by tick() and close() so beat exits with the reason
            self._error = exc

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self._error is not None:
            raise SystemExit(1)  # beat then closes the scheduler, which reports the error
        return self.tick_interval

    def sync(self) -> None:
        """Nothing to persist: the store is the schedule."""

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)
        error, self._error = self._error, None
        if error is not None:
            reason = str(error) if isinstance(error, ZSetSchedulerError) else repr(error)
            _exit(f"zset dispatcher stopped: {reason}")

    @property
    def info(self) -> str:
        """The banner's lines: this dispatcher, the periodic entries, and who leads them."""
        lines = [f"    . zset dispatcher -> {process_member_id()}"]
        try:
            store = ensure_installation(self.app).store
            counts = PeriodicStore(store).counts()
            _, shards = read_shards(store, range(store.shards))
        except Exception as exc:  # the banner must never be the reason beat does not start
            lines.append(f"    . periodic entries -> {self._configured} in beat_schedule; store not readable: {exc}")
            return "\n".join(lines)
        total = sum(c.entries for c in counts)
        lines.append(f"    . periodic entries -> {self._configured} in beat_schedule, {total} in the store "
                     f"({sum(c.scheduled for c in counts)} scheduled), on {store.shards} shards")
        leaders: dict[str, list[str]] = {}
        for c, s in zip(counts, shards, strict=True):
            if c.entries:
                who = s.leader.member if s.leader else ("unannounced" if s.locked else "none yet")
                leaders.setdefault(who, []).append(str(c.shard))
        for who, led in sorted(leaders.items()):
            lines.append(f"    . periodic leader -> shard {','.join(led)}: {who}")
        return "\n".join(lines)
