"""Reading the validated :class:`~celery_zset_scheduler.config.Settings` from a Celery app."""

from __future__ import annotations

from typing import Any

from ..config import Settings
from ..errors import ConfigurationError


def read_settings(app: Any, **overrides: Any) -> Settings:
    """Validate the app's ``zset_scheduler_*`` settings (Django's ``CELERY_`` namespace too)."""
    conf = app.conf
    settings = Settings.from_config(conf.get, list(conf.keys()), **overrides)
    if settings.url is None:
        url = broker_redis_url(app)
        if url is None:
            raise ConfigurationError(
                "zset_scheduler_url is required: the broker is not Redis "
                f"({_scheme(conf.broker_url)!r}), so there is no Redis to default to"
            )
        # A TLS broker's certificate settings are the store's too (same names in redis-py).
        tls = conf.broker_use_ssl if isinstance(conf.broker_use_ssl, dict) else {}
        options = {**tls, **settings.redis_options}
        settings = Settings.from_config(conf.get, [], **{**overrides, "url": url, "redis_options": options})
    return settings


def broker_redis_url(app: Any) -> str | None:
    """The broker URL when it is a Redis one (first of a failover list), in redis-py's form."""
    url = app.conf.broker_write_url or app.conf.broker_url
    if isinstance(url, (list, tuple)):
        url = url[0] if url else None
    if not url:
        return None
    url = str(url).split(";")[0].strip()
    if url.startswith(("redis://", "rediss://")):
        return url
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://"):]
    return None


def _scheme(url: Any) -> str:
    text = str(url or "amqp://")
    return text.split("://", 1)[0] if "://" in text else text
