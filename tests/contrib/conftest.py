"""The admin pages against a real Redis holding 100,000+ scheduled tasks, real dead letters and
periodic entries.

Django is configured by ``tests/django_settings.py`` (shared with any other folder that needs it).
One store is filled once per session; each test acts on entries of its own (its own ids and task
names), so tests do not depend on one another.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from celery import Celery

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.celery.periodic.config import sync
from celery_zset_scheduler.celery.periodic.entries import config_entries
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.testing import RedisServer

from ..django_settings import configure

configure()

BIG = 100_000
SHARDS = 4
ADMIN = "/admin/zset_scheduler"


def make_app(server: RedisServer, name: str, prefix: str = "za") -> Celery:
    """An installed Celery app on ``server`` with the example's kind of tasks."""
    app = Celery(name, set_as_current=False)
    app.conf.update(
        broker_url=server.url_db(1), zset_scheduler_url=server.url_db(0), zset_scheduler_prefix=prefix,
        zset_scheduler_shards=SHARDS, broker_connection_retry_on_startup=True,
        beat_schedule={"cleanup": {"task": "shop.cleanup", "schedule": 60.0}},
    )

    @app.task(name="shop.remind", shared=False, typing=False)
    def remind(user: str, text: str) -> None: ...

    @app.task(name="shop.charge", shared=False, typing=False)
    def charge(order_id: int, cents: int) -> None: ...

    @app.task(name="shop.webhook", shared=False, typing=False)
    def webhook(url: str) -> None: ...

    @app.task(name="shop.cleanup", shared=False, typing=False)
    def cleanup() -> None: ...

    celery_zset_scheduler.install(app)
    return app


def fill(app: Celery, n: int, task: str = "shop.remind", start: int = 0, countdown: float = 86_400.0) -> list[str]:
    """``n`` real reminders due a second apart from ``countdown`` seconds on."""
    calls = [((f"user{i}@example.com", f"reminder {i}"), {}, countdown + i) for i in range(start, start + n)]
    return celery_zset_scheduler.schedule_many(app.tasks[task], calls)


def dead(app: Celery, task_id: str, task: str = "shop.webhook", reason: str = "retries_exhausted") -> DeadLetter:
    """A dead letter holding a real stored message (of ``shop.webhook``, named ``task``)."""
    (sent,) = celery_zset_scheduler.schedule_many(app.tasks["shop.webhook"], [(("http://127.0.0.1:9/hook",), {}, 3600)])
    found = celery_zset_scheduler.lookup(app, sent)
    assert found is not None and found[1] is not None
    celery_zset_scheduler.cancel(app, sent)
    from dataclasses import replace

    message = found[1]
    headers = {**message.headers, "id": task_id, "root_id": task_id, "task": task}
    message = replace(message, task_id=task_id, headers=headers,
                      properties={**message.properties, "correlation_id": task_id})
    letter = DeadLetter.for_message(
        message, reason, exc_type="ConnectionError", exc_message="webhook answered 503", attempts=4,
        traceback="Traceback (most recent call last):\n  File \"shop/tasks.py\", line 40, in webhook\n"
                  "ConnectionError: webhook answered 503\n",
        args=["http://127.0.0.1:9/hook"], kwargs={}, worker="celery@test",
    )
    ensure_installation(app).dead_letters.add(letter)
    return letter


@dataclass
class BigStore:
    server: RedisServer
    app: Celery

    @property
    def store(self) -> Store:
        return ensure_installation(self.app).store


@pytest.fixture(scope="session")
def big() -> Iterator[BigStore]:
    """One private Redis holding 100,000 pending reminders, 200 dead letters and the app's
    ``beat_schedule`` synced into periodic entries (as a dispatcher start does)."""
    with RedisServer() as server:
        app = make_app(server, "zadmin")
        fill(app, BIG)
        for i in range(200):
            dead(app, f"dead-{i}")
        sync(app, config_entries(app))
        yield BigStore(server, app)


@pytest.fixture(autouse=True)
def _admin_app(big: BigStore, settings: Any) -> None:
    settings.CELERY_ZSET_ADMIN_APP = big.app


@dataclass
class Users:
    anonymous: None
    staff: Any  # staff, no permission of ours
    viewer: Any  # staff with the view permissions
    changer: Any  # staff with view and change
    outsider: Any  # every permission, but not staff


def _user(name: str, *, staff: bool, perms: list[str]) -> Any:
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(name, f"{name}@example.com", "pw", is_staff=staff)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="zset_scheduler",
                                                        codename__in=perms))
    return user


VIEW = ["view_overview", "view_scheduledtask", "view_deadletter", "view_periodicentry"]
CHANGE = [*VIEW, "change_scheduledtask", "change_deadletter", "change_periodicentry"]


@pytest.fixture
def users(db: Any) -> Users:
    return Users(None, _user("staff", staff=True, perms=[]), _user("viewer", staff=True, perms=VIEW),
                 _user("changer", staff=True, perms=CHANGE), _user("outsider", staff=False, perms=CHANGE))


@pytest.fixture
def as_changer(client: Any, users: Users) -> Any:
    client.force_login(users.changer)
    return client
