"""Django settings for the django-celery-beat import tests, set only if nobody configured Django.

Configured here rather than through DJANGO_SETTINGS_MODULE so that test modules elsewhere never see
Django unless this folder is collected; an existing configuration is left alone (the tests that
need django_celery_beat then skip). Where Django or django-celery-beat is not installed (the slice
run at the ends of the supported range), nothing is configured and those tests skip.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("django") and importlib.util.find_spec("django_celery_beat"):
    import django
    from django.conf import settings
else:
    settings = None

if settings is not None and not settings.configured:
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_celery_beat"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()
