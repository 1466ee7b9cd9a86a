"""Settings of the example shop. The environment points it at a Redis and a database:
``SHOP_REDIS_URL`` (broker and store), ``SHOP_PREFIX`` (the store's keys), ``SHOP_DB`` (SQLite file),
``SHOP_WEBHOOK_URL`` (the partner endpoint the webhook task calls)."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# An example: never run it like this anywhere but on your own machine.
SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-only-not-a-secret")
DEBUG = os.environ.get("SHOP_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "celery_zset_scheduler.contrib.django",  # the admin pages over the store, manage.py zset
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DB", str(BASE_DIR / "db.sqlite3")),
        "OPTIONS": {"timeout": 30},  # the worker, the dev server and the seed write at once
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
EMAIL_BACKEND = "django.core.mail.backends.dummy.EmailBackend"  # a real shop: SMTP
DEFAULT_FROM_EMAIL = "shop@example.com"

SHOP_WEBHOOK_URL = os.environ.get("SHOP_WEBHOOK_URL", "http://127.0.0.1:8000/hooks/partner/")
SHOP_PARTNER_FAILURE_RATE = float(os.environ.get("SHOP_PARTNER_FAILURE_RATE", "0.6"))

# Celery, through the CELERY_ namespace: the store's settings are CELERY_ZSET_SCHEDULER_*.
REDIS_URL = os.environ.get("SHOP_REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SHOP_PREFIX", "shop")
CELERY_WORKER_PREFETCH_MULTIPLIER = 4
CELERY_ZSET_SCHEDULER_PREFIX = os.environ.get("SHOP_PREFIX", "shop")
CELERY_ZSET_SCHEDULER_SHARDS = 8
CELERY_ZSET_SCHEDULER_LOCK_TIMEOUT = 5.0
CELERY_BEAT_SCHEDULE = {
    "cleanup": {"task": "shop.cleanup", "schedule": 60.0},
}
