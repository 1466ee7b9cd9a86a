"""Which Celery app (and so which store) the admin pages and ``manage.py zset`` work on.

``CELERY_ZSET_ADMIN_APP`` (``"proj.celery:app"`` or ``"proj.celery.app"``, or the app itself) when
set; otherwise the one app of this process that ``install(app)`` was called on (Celery's Django
layout imports it with the project); otherwise an app configured from Django's settings with the
``CELERY_`` namespace (and installed), so ``CELERY_BROKER_URL`` / ``CELERY_ZSET_SCHEDULER_*`` are
all it takes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.utils.imports import symbol_by_name
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ...celery.core.state import Installation, ensure_installation, installed_apps
from ...celery.install import install

APP_SETTING = "CELERY_ZSET_ADMIN_APP"

_own: dict[str, Any] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class AdminOptions:
    """How much one page shows and reads (``CELERY_ZSET_ADMIN_PAGE_SIZE``, ``..._SCAN_LIMIT``)."""

    page_size: int = 100
    scan_limit: int = 2_000  # with a task-name or reason filter: most entries read for one page

    @classmethod
    def from_settings(cls) -> AdminOptions:
        page = _positive("CELERY_ZSET_ADMIN_PAGE_SIZE", cls.page_size, 1000)
        scan = _positive("CELERY_ZSET_ADMIN_SCAN_LIMIT", cls.scan_limit, 100_000)
        return cls(page, max(scan, page))


def _positive(name: str, default: int, most: int) -> int:
    value = getattr(settings, name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ImproperlyConfigured(f"{name}: expected an integer from 1 to {most}, got {value!r}")
    return value


def celery_app() -> Any:
    """The Celery app whose store the pages show."""
    configured = getattr(settings, APP_SETTING, None)
    if configured:
        if not isinstance(configured, str):
            return configured
        try:
            return symbol_by_name(configured)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ImproperlyConfigured(f"{APP_SETTING} = {configured!r}: {exc}") from None
    apps = installed_apps()
    if len(apps) == 1:
        return apps[0]
    if len(apps) > 1:
        names = ", ".join(sorted(str(a.main) for a in apps))
        raise ImproperlyConfigured(f"several installed Celery apps ({names}): set {APP_SETTING} to the one to show")
    with _lock:
        if "app" not in _own:
            app = Celery("zset-admin", set_as_current=False)
            app.config_from_object("django.conf:settings", namespace="CELERY")
            # Installed as a project's app is: periodic entries build their message through the
            # store's sender (an uninstalled app would hand its template option to Kombu).
            install(app)
            _own["app"] = app
        return _own["app"]


def installation() -> Installation:
    return ensure_installation(celery_app())


def task_names(app: Any, most: int = 50) -> list[str]:
    """The app's own registered task names (no Redis read), for the task-name filter.

    A web process never starts a worker, so the project's task modules (``autodiscover_tasks``) are
    imported here, once, as django-celery-beat's admin does.
    """
    if not getattr(app, "_zset_admin_imported", False):
        app.loader.import_default_modules()
        app._zset_admin_imported = True
    names = sorted(n for n in app.tasks if not n.startswith("celery."))
    return names[:most]
