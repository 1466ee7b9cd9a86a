"""``celery zset import-eta``: move a broker's backlog of native ETA messages into the store.

A team adopting the plugin has native ETA messages waiting in its broker: in the queues, in a Redis
broker's ``unacked`` hash while (dead) workers held them, and for RabbitMQ quorum queues in Celery's
delay queues (``celery_delayed_0..27``). With the workers stopped, every message whose ETA is in
the future moves into the store with its id, routing and headers intact; the rest stays where it
was (or is put back in order). Each message is, at every moment, in exactly one place (the broker,
a staging place of the broker, or the store), and the store remembers every id it imported in the
same atomic step as scheduling it, so an interrupted run loses and duplicates nothing and a second
run finishes it. ``dry_run`` only counts.

Run by ``celery zset import-eta``. Imports :mod:`..producer` (an imported message is stored as a
timed send is), :mod:`..core` and the layers below; not the other roles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.state import broker_redis_url, ensure_installation
from .common import Importer, Summary

__all__ = ["Summary", "broker_kind", "import_backlog"]


def broker_kind(app: Any) -> str:
    """``"redis"`` or ``"amqp"`` (py-amqp); anything else is refused."""
    if broker_redis_url(app) is not None:
        return "redis"
    with app.connection_for_write() as conn:
        if getattr(conn.transport, "driver_type", None) == "amqp":
            return "amqp"
        name = conn.transport_cls
    raise ValueError(f"import-eta supports Redis and RabbitMQ brokers, not {name!r}")


def import_backlog(app: Any, queues: Sequence[str] | None = None, *, dry_run: bool = False,
                   progress: Callable[[int], None] | None = None,
                   total: Callable[[int], None] | None = None) -> list[Summary]:
    """Import the app's broker backlog (``queues``: the app's queues when None). ``total(n)`` is told
    how many messages will be looked at, ``progress(k)`` each time ``k`` more were."""
    inst = ensure_installation(app)
    importer = Importer(app, inst.store, dry_run=dry_run, progress=progress or (lambda n: None))
    names = list(queues) if queues else sorted(app.amqp.queues)
    if broker_kind(app) == "redis":
        from .redis_broker import RedisBacklog

        return RedisBacklog(app, importer).run(names, total or (lambda n: None), explicit=bool(queues))
    from .amqp_broker import AmqpBacklog

    return AmqpBacklog(app, importer).run(names, total or (lambda n: None), explicit=bool(queues))
