"""No password of the store's URL in anything printed: doctor, one-line errors, call-site errors,
and Celery's own reports (``celery report``, ``app.conf.humanize()``, ``celery inspect conf``)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from celery import Celery

import celery_zset_scheduler
from celery_zset_scheduler.errors import StoreUnavailable
from celery_zset_scheduler.testing import RedisServer

from ..support.cli_support import cli_env, invoke
from ..support.helpers import BROKER_DB, AppFactory
from ..support.procs import CELERY, ROOT

SECRET = "s3cret-pw"


@pytest.fixture
def auth_server() -> Iterator[RedisServer]:
    with RedisServer(password=SECRET, extra=["--requirepass", SECRET]) as server:
        yield server


def query_url(server: RedisServer, db: int = 0, password: str = SECRET) -> str:
    """The store's URL with the password as a query parameter, as redis-py accepts it."""
    return f"redis://127.0.0.1:{server.port}/{db}?password={password}"


def test_doctor_never_prints_a_password_given_as_a_query_parameter(auth_server: RedisServer, apps: AppFactory) -> None:
    app = apps(zset_scheduler_url=query_url(auth_server), broker_url=auth_server.url_db(BROKER_DB))
    text = invoke(app, "doctor")
    data = invoke(app, "doctor", "--json")
    assert "Redis" in text.output and f"127.0.0.1:{auth_server.port}/0?password=***" in text.output
    assert "reachable at redis://:***@127.0.0.1" in text.output  # the broker's, in the user-info
    for output in (text.output, data.output):
        assert SECRET not in output


def test_one_line_errors_never_print_the_password(auth_server: RedisServer, apps: AppFactory) -> None:
    with RedisServer() as gone:
        unreachable = query_url(gone)
    for url, expected in [
        (unreachable, "Error: cannot reach Redis at redis://127.0.0.1:"),
        (query_url(auth_server, password="wrong-" + SECRET), "Error: Redis at redis://127.0.0.1:"),  # refused
        (f"redis://:{SECRET}@127.0.0.1:{auth_server.port}/0;redis://:{SECRET}@127.0.0.1:1/0", "Error: "),
    ]:
        app = apps(zset_scheduler_url=url)
        result = invoke(app, "status")
        assert result.exit_code == 1 and result.output.startswith(expected), result.output
        assert SECRET not in result.output


def test_a_call_site_error_never_prints_the_password(apps: AppFactory) -> None:
    with RedisServer() as gone:
        url = query_url(gone)
    app = apps(zset_scheduler_url=url)
    masked = r"zset store at redis://127\.0\.0\.1:\d+/0\?password=\*\*\*: "
    with pytest.raises(StoreUnavailable, match=masked) as failed:
        app.tasks["t.record"].apply_async(countdown=10)
    assert SECRET not in str(failed.value)


def test_celery_report_masks_the_store_url(redis_server: RedisServer) -> None:
    env = cli_env(redis_server)
    env["ZSET_CLI_STORE"] = f"redis://alice:{SECRET}@127.0.0.1:{redis_server.port}/0"
    report = subprocess.run([CELERY, "-A", "tests.support.cli_app", "report"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    assert f"zset_scheduler_url: 'redis://alice:***@127.0.0.1:{redis_server.port}/0'" in report.stdout
    assert SECRET not in report.stdout + report.stderr


def test_humanize_masks_the_store_url_of_installed_apps_only(apps: AppFactory) -> None:
    installed = apps(zset_scheduler_url=f"redis://127.0.0.1:1/0?password={SECRET}")
    assert "zset_scheduler_url: 'redis://127.0.0.1:1/0?password=***'" in installed.conf.humanize()
    assert SECRET not in installed.conf.humanize(with_defaults=True)
    assert installed.conf.table(censored=False)["zset_scheduler_url"].endswith(SECRET)  # asked for: shown
    # An app that is not installed keeps Celery's own report, unchanged.
    plain = apps(install=False, zset_scheduler_url=f"redis://127.0.0.1:1/0?password={SECRET}")
    assert plain.conf.table()["zset_scheduler_url"].endswith(SECRET)


def test_humanize_masks_a_django_namespaced_store_url() -> None:
    class DjangoSettings:
        CELERY_BROKER_URL = "redis://127.0.0.1:1/1"
        CELERY_ZSET_SCHEDULER_URL = f"redis://:{SECRET}@127.0.0.1:1/0"

    app = Celery("dj-masking", set_as_current=False)
    app.config_from_object(DjangoSettings, namespace="CELERY")
    celery_zset_scheduler.install(app)
    text = app.conf.humanize()
    assert "redis://:***@127.0.0.1:1/0" in text and SECRET not in text


def test_inspect_conf_masks_the_store_url(auth_server: RedisServer, apps: AppFactory) -> None:
    app = apps(zset_scheduler_url=query_url(auth_server))
    apps.worker(app)
    # The worker is started without Celery's ping check, and a broadcast sent over Redis before its
    # control consumer subscribes is lost: ask until it answers.
    deadline = time.monotonic() + 60
    replies: dict = {}
    while not replies and time.monotonic() < deadline:
        replies = app.control.inspect(timeout=2).conf() or {}
    assert replies, "no worker answered inspect conf within 60 s"
    for conf in replies.values():
        assert conf["zset_scheduler_url"] == f"redis://127.0.0.1:{auth_server.port}/0?password=***"
    assert SECRET not in json.dumps(replies)
