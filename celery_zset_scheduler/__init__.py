"""celery-zset-scheduler: Celery countdown/ETA tasks wait in Redis sorted sets, not in worker RAM.

    import celery_zset_scheduler
    celery_zset_scheduler.install(app)

Then run one or more dispatchers: ``celery -A proj beat -S zset`` or ``celery -A proj zset run``.
"""

from __future__ import annotations

from typing import Any

from .celery.core.signals import task_dead_lettered
from .celery.install import install
from .celery.producer.api import cancel, lookup, reschedule
from .celery.producer.bulk import schedule_many
from .celery.worker.tasks import IdempotentTask, RetryPolicy, ZSetTask
from .errors import (
    ConfigurationError,
    NotSerializable,
    PermissionRefused,
    PoisonMessage,
    ShardCountMismatch,
    StoreUnavailable,
    ZSetSchedulerError,
)
from .model.codec import StoredMessage
from .settings import Settings
from .store.entries import CancelStatus, StoredEntry
from .version import __version__ as __version__

__all__ = [
    "CancelStatus",
    "ConfigurationError",
    "IdempotentTask",
    "NotSerializable",
    "PermissionRefused",
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
        from .celery.dispatcher.beat import ZSetScheduler

        return ZSetScheduler
    raise AttributeError(name)
