"""What the periodic entries tests share: URLs, a valid form, the form's errors by field."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

from django.test import Client

from celery_zset_scheduler.celery.periodic import runtime as periodic
from celery_zset_scheduler.celery.periodic.runtime import PeriodicInfo

from .conftest import ADMIN, BigStore

PERIODIC = f"{ADMIN}/periodicentry"
ADD = f"{PERIODIC}/add/"
ACTION = f"{PERIODIC}/action/"


def change_url(name: str) -> str:
    from django.contrib.admin.utils import quote

    return f"{PERIODIC}/{quote(name)}/change/"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def add(big: BigStore, name: str, every: float = 3600.0, **fields: Any) -> PeriodicInfo:
    """An interval entry of ``shop.remind`` added with the runtime API."""
    fields.setdefault("kwargs", {"user": "ops@example.com", "text": name})
    return periodic.add(big.app, name, "shop.remind", every, **fields)


def info(big: BigStore, name: str) -> PeriodicInfo:
    found = periodic.get(big.app, name)
    assert found is not None, name
    return found


def form(name: str, **changes: Any) -> dict[str, Any]:
    """A valid add form: every 30 seconds, ``shop.remind`` with keyword arguments."""
    data: dict[str, Any] = {
        "name": name, "task": "shop.remind", "description": "", "enabled": "on", "schedule_type": "interval",
        "every": "30", "minute": "*", "hour": "*", "day_of_month": "*", "month_of_year": "*", "day_of_week": "*",
        "timezone": "", "event": "", "latitude": "", "longitude": "", "at": "",
        "args": "[]", "kwargs": '{"user": "ops@example.com", "text": "hello"}', "queue": "", "exchange": "",
        "routing_key": "", "priority": "", "headers": "{}", "options": "{}", "start_time": "", "end_time": "",
        "expires": "", "expire_seconds": "", "catchup": "once", "catchup_window": "", "overlap": "allow",
        "jitter": "0", "revision": "",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}  # None: the field is left out (an unchecked box)


def edit_form(big: BigStore, name: str, /, **changes: Any) -> dict[str, Any]:
    """The edit form as the page fills it for ``name``, with ``changes``."""
    from celery_zset_scheduler.contrib.django.periodic_form import initial_of

    current = info(big, name)
    data = {k: ("" if v is None else v) for k, v in initial_of(current.entry, current.state.revision).items()}
    for key in ("enabled", "relative", "one_off"):
        data[key] = "on" if data.get(key) else None
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def field_errors(page: str) -> dict[str, str]:
    """``{field name: its error text}`` of a rendered form."""
    found = re.findall(r'<div class="form-row field-(\w+) errors">\s*<ul class="errorlist"[^>]*>(.*?)</ul>', page,
                       re.S)
    return {name: html.unescape(re.sub(r"<[^>]+>", " ", text)).strip() for name, text in found}


def non_field_errors(page: str) -> str:
    found = re.findall(r'<ul class="errorlist nonfield"[^>]*>(.*?)</ul>', page, re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", t)).strip() for t in found)


def listed(page: str) -> list[str]:
    return [html.unescape(n) for n in re.findall(r'name="_selected_action" value="([^"]+)"', page)]


def client_for(user: Any) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client
