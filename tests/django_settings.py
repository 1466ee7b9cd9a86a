"""The Django settings of the test suite, shared by every folder whose tests need Django.

``configure()`` sets them when nobody configured Django yet. When a conftest elsewhere configured
it first with fewer apps (another folder's tests are collected earlier), the missing apps and the
admin's settings are added through ``override_settings``, Django's own way of changing
``INSTALLED_APPS`` after start-up; that folder's database and time settings are kept. Collection
happens before any test runs, so the test database is created with every app either way.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import django
from django.conf import settings

APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "celery_zset_scheduler.contrib.django",
]
if importlib.util.find_spec("django_celery_beat") is not None:  # the periodic importers' tests
    APPS.append("django_celery_beat")

# Set only when Django is not configured yet: changing them afterwards would not take effect.
STARTUP: dict[str, Any] = {
    "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    "USE_TZ": True,
    "TIME_ZONE": "UTC",
    "DEFAULT_AUTO_FIELD": "django.db.models.AutoField",
}

ADMIN: dict[str, Any] = {
    "SECRET_KEY": "tests-only-not-secret",
    "ALLOWED_HOSTS": ["testserver", "localhost", "127.0.0.1"],
    "ROOT_URLCONF": "tests.contrib.urls",
    "MIDDLEWARE": [
        "django.middleware.security.SecurityMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    "TEMPLATES": [{
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": [
            "django.template.context_processors.request",
            "django.contrib.auth.context_processors.auth",
            "django.contrib.messages.context_processors.messages",
        ]},
    }],
    "STATIC_URL": "/static/",
    "PASSWORD_HASHERS": ["django.contrib.auth.hashers.MD5PasswordHasher"],  # fast logins
}


def configure() -> None:
    """Make Django ready with every app the suite needs, whoever configured it first."""
    if not settings.configured:
        settings.configure(INSTALLED_APPS=APPS, **STARTUP, **ADMIN)
        django.setup()
        return
    if not django.apps.apps.ready:
        django.setup()
    missing = [a for a in APPS if a not in settings.INSTALLED_APPS]
    if not missing and getattr(settings, "ROOT_URLCONF", None) == "tests.contrib.urls":
        return
    from django.test.utils import override_settings

    override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, *missing], **ADMIN).enable()
