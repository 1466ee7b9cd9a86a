"""Building a dispatcher for a Celery app (used by ``beat -S zset`` and ``celery zset run``)."""

from __future__ import annotations

from typing import Any

from ..dispatcher import Dispatcher, DispatcherConfig
from ..errors import ConfigurationError
from ..events import Observer
from .installation import ensure_installation
from .publisher import KombuPublisher


def build_dispatcher(
    app: Any, *, pinned: set[int] | None = None, member_id: str | None = None,
    observer: Observer | None = None,
) -> Dispatcher:
    inst = ensure_installation(app)
    s = inst.settings
    if pinned is not None:
        bad = sorted(x for x in pinned if not 0 <= x < s.shards)
        if bad:
            raise ConfigurationError(f"--shards {bad}: the store has shards 0..{s.shards - 1}")
    config = DispatcherConfig(
        batch_size=s.batch_size,
        lock_timeout=s.lock_timeout,
        max_interval=s.max_interval,
        inflight_timeout=s.inflight_timeout,
        heartbeat_interval=s.heartbeat_interval,
    )
    return Dispatcher(
        inst.store, KombuPublisher(app), config, member_id=member_id, pinned=pinned,
        dead_letters=inst.dead_letters, observer=observer,
    )
