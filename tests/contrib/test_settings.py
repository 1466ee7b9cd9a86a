"""Which app the pages show, and what they say when the store cannot be reached."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from celery_zset_scheduler.contrib.django import conf
from celery_zset_scheduler.testing import RedisServer, free_port

from .conftest import ADMIN, BigStore, Users, make_app

app_by_path = None  # set by a test: CELERY_ZSET_ADMIN_APP names it by its dotted path


def test_the_app_is_named_by_a_dotted_path_or_found_when_it_is_the_only_one(big: BigStore, settings: Any) -> None:
    global app_by_path
    app_by_path = big.app
    settings.CELERY_ZSET_ADMIN_APP = f"{__name__}:app_by_path"
    assert conf.celery_app() is big.app
    settings.CELERY_ZSET_ADMIN_APP = f"{__name__}:no_such_name"
    with pytest.raises(ImproperlyConfigured, match="CELERY_ZSET_ADMIN_APP"):
        conf.celery_app()
    settings.CELERY_ZSET_ADMIN_APP = None
    if len(conf.installed_apps()) > 1:  # the other tests' apps are installed too
        with pytest.raises(ImproperlyConfigured, match="several installed Celery apps"):
            conf.celery_app()


def test_bad_page_settings_are_refused_by_name(settings: Any) -> None:
    settings.CELERY_ZSET_ADMIN_PAGE_SIZE = 0
    with pytest.raises(ImproperlyConfigured, match="CELERY_ZSET_ADMIN_PAGE_SIZE: expected an integer from 1 to 1000"):
        conf.AdminOptions.from_settings()


def test_a_store_that_cannot_be_reached_is_a_page_that_says_so(users: Users, settings: Any) -> None:
    server = RedisServer(port=free_port())  # never started: nothing listens there
    settings.CELERY_ZSET_ADMIN_APP = make_app(server, "zdown", prefix="zd")
    client = Client()
    client.force_login(users.changer)
    pages = (f"{ADMIN}/overview/", f"{ADMIN}/scheduledtask/", f"{ADMIN}/deadletter/", f"{ADMIN}/periodicentry/",
             f"{ADMIN}/periodicentry/add/", f"{ADMIN}/periodicentry/nightly/change/")
    for url in pages:
        response = client.get(url)
        assert response.status_code == 503
        page = response.content.decode()
        assert "cannot reach Redis at redis://127.0.0.1:" in page and 'class="breadcrumbs"' in page
    for url, data in ((f"{ADMIN}/periodicentry/add/", {"name": "x", "task": "t", "schedule_type": "interval",
                                                       "every": "5", "catchup": "once", "overlap": "allow"}),
                      (f"{ADMIN}/periodicentry/action/", {"action": "run_now", "_selected_action": "x",
                                                          "post": "yes"})):
        response = client.post(url, data)
        assert response.status_code == 503 and "cannot reach Redis" in response.content.decode()
