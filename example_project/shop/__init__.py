"""An example Django shop whose Celery app is configured from Django's settings.

Importing the Celery app here (Celery's Django layout) makes it load with Django, so the admin
pages and ``manage.py zset`` find it.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
