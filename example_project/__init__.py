"""An example project: a Celery app with celery-zset-scheduler installed, and a demo."""
