"""Which transport an installed app's broker connections use: this package's Redis transport for
a ``redis://`` broker, unless the app names its own ``broker_transport`` or
``zset_scheduler_broker_transport = False``. Chosen for each connection Celery makes (through the
app's ``amqp.Connection``), so the URL it uses is the one looked at."""

from __future__ import annotations

from typing import Any

from kombu.connection import Connection

from ..core.state import installation_for
from .redis_broker import TRANSPORT


def transport_for(app: Any, url: Any) -> str | None:
    """This package's transport when ``url`` (a failover list too) is all ``redis://``."""
    inst = installation_for(app)
    if inst is None or not inst.settings.broker_transport or not url:
        return None
    urls = url if isinstance(url, (list, tuple)) else str(url).split(";")
    parts = [str(u).strip() for u in urls if str(u).strip()]
    return TRANSPORT if parts and all(p.startswith("redis://") for p in parts) else None


def connection(app: Any, url: Any = None, *args: Any, transport: Any = None, **kwargs: Any) -> Connection:
    """Celery's ``app.amqp.Connection(...)``, with the transport chosen when the app names none."""
    kwargs["transport"] = transport or transport_for(app, url)
    return Connection(url, *args, **kwargs)
