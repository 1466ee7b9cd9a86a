"""celery-zset-scheduler: Celery countdown/ETA tasks wait in Redis sorted sets, not in worker RAM.

    import celery_zset_scheduler
    celery_zset_scheduler.install(app)

Then run one or more dispatchers: ``celery -A proj beat -S zset`` or ``celery -A proj zset run``.
"""

from __future__ import annotations

from typing import Any

from .celery.api import cancel, lookup, reschedule
from .celery.bulk import schedule_many
from .celery.install import install
from .celery.signals import task_dead_lettered
from .celery.tasks import IdempotentTask, RetryPolicy, ZSetTask
from .errors import (
    ConfigurationError,
    NotSerializable,
    PoisonMessage,
    ShardCountMismatch,
    StoreUnavailable,
    ZSetSchedulerError,
)
from .model.codec import StoredMessage
from .settings import Settings
from .store.pending import CancelStatus, StoredEntry

__version__ = "0.1.0"

__all__ = [
    "CancelStatus",
    "ConfigurationError",
    "IdempotentTask",
    "NotSerializable",
    "PoisonMessage",
    "RetryPolicy",
    "Settings",
    "ShardCountMismatch",
    "StoreUnavailable",
    "StoredEntry",
    "StoredMessage",
    "ZSetScheduler",
    "ZSetSchedulerError",
    "ZSetTask",
    "cancel",
    "install",
    "lookup",
    "reschedule",
    "schedule_many",
    "task_dead_lettered",
]


def __getattr__(name: str) -> Any:
    # Imported on demand: celery.beat is only needed by the process that runs beat.
    if name == "ZSetScheduler":
        from .celery.beat import ZSetScheduler

        return ZSetScheduler
    raise AttributeError(name)
