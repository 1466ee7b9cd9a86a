"""Pure data and rules: no Redis, no Celery, no Kombu (stdlib and :mod:`celery_zset_scheduler.errors` only)."""
