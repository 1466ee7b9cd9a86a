"""A project with no Celery app of its own in the web process: the pages configure one from
Django's settings (``CELERY_`` namespace). Adding a periodic entry there builds its message
through the store's sender, as with an installed app, and sends nothing to the broker. Run in a
fresh interpreter: this test process has installed apps of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from celery_zset_scheduler.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, re, sys
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                    "django.contrib.sessions", "django.contrib.messages", "celery_zset_scheduler.contrib.django"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    SECRET_KEY="tests-only", ROOT_URLCONF="tests.contrib.urls", ALLOWED_HOSTS=["testserver"],
    MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                "django.middleware.csrf.CsrfViewMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
                "django.contrib.messages.middleware.MessageMiddleware"],
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
                "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                   "django.contrib.auth.context_processors.auth",
                                                   "django.contrib.messages.context_processors.messages"]}}],
    STATIC_URL="/static/", USE_TZ=True,
    CELERY_BROKER_URL=sys.argv[1], CELERY_ZSET_SCHEDULER_URL=sys.argv[2], CELERY_ZSET_SCHEDULER_PREFIX="own",
)
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from django.test import Client
from celery_zset_scheduler.celery.periodic import runtime as periodic
from celery_zset_scheduler.celery.core.state import installed_apps
from celery_zset_scheduler.contrib.django.conf import celery_app

assert installed_apps() == []
client = Client()
client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
response = client.post("/admin/zset_scheduler/periodicentry/add/", {
    "name": "own-app-entry", "task": "proj.report", "schedule_type": "interval", "every": "60", "enabled": "on",
    "args": "[1]", "kwargs": "{}", "headers": "{}", "options": "{}", "catchup": "once", "overlap": "allow",
    "jitter": "0",
})
found = periodic.get(celery_app(), "own-app-entry")
errors = re.findall(r"errorlist[^>]*>(.*?)</ul>", response.content.decode(), re.S)
print(json.dumps({"status": response.status_code, "stored": found is not None, "errors": errors}))
'''


def test_the_app_made_from_django_settings_builds_entries_through_the_store(redis_server: RedisServer,
                                                                           tmp_path: Path) -> None:
    broker, store = redis_server.url_db(7), redis_server.url_db(8)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, broker, store], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        assert result["status"] == 302 and result["stored"], result["errors"]
        assert redis_server.client(7).llen("celery") == 0  # nothing went to the broker
    finally:
        redis_server.client(7).flushdb()
        redis_server.client(8).flushdb()
