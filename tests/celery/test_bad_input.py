"""Bad input fails at the call site with an error that names it (I8): ids that are not valid
Unicode, store URLs redis-py would refuse."""

from __future__ import annotations

import json

import pytest

import celery_zset_scheduler
from celery_zset_scheduler.celery.core.state import installation_for
from celery_zset_scheduler.errors import ConfigurationError, InvalidId

from ..support.cli_support import invoke
from ..support.helpers import AppFactory
from ..support.tools import pending

LONE = "ab\udcffc"  # what bytes b"ab\xffc" decode to with errors="surrogateescape"


def test_a_task_id_with_a_lone_surrogate_is_refused_naming_it(apps: AppFactory) -> None:
    app = apps(result_backend=None)  # Celery's Redis result backend refuses such an id itself, first
    with pytest.raises(InvalidId, match=r"task id 'ab\\udcffc' cannot be stored: '\\udcff' at position 2 is a lone "
                                        r"surrogate") as failed:
        app.tasks["t.record"].apply_async(task_id=LONE, countdown=10)
    assert isinstance(failed.value, ValueError)
    with pytest.raises(InvalidId, match="task id"):
        app.send_task("t.record", task_id=LONE, countdown=10)
    assert pending(apps.store(app)) == 0


def test_an_idempotency_key_with_a_lone_surrogate_is_refused_naming_it(apps: AppFactory) -> None:
    app = apps()
    with pytest.raises(InvalidId, match=r"idempotency key 'charge:ab\\udcffc' cannot be stored"):
        app.tasks["t.charge"].apply_async(kwargs={"order_id": LONE}, countdown=10)
    with pytest.raises(InvalidId, match="idempotency key"):
        celery_zset_scheduler.schedule_many(app.tasks["t.charge"], [((), {"order_id": LONE}, 10)])
    assert pending(apps.store(app)) == 0


def test_such_an_id_is_simply_not_pending(apps: AppFactory) -> None:
    # It can never have been stored: looking it up, cancelling or revoking it is no error (plain
    # Celery revokes any id, and a task sent without a countdown may well carry it).
    app = apps()
    assert celery_zset_scheduler.lookup(app, LONE) is None
    assert celery_zset_scheduler.cancel(app, LONE, "other") == {LONE: "unknown", "other": "unknown"}
    assert celery_zset_scheduler.reschedule(app, LONE, countdown=5) is False
    app.control.revoke(LONE)
    result = invoke(app, "cancel", LONE, "--yes", "--json")
    assert result.exit_code == 3 and json.loads(result.output)["results"] == [{"id": LONE, "status": "unknown"}]
    table = invoke(app, "cancel", LONE, "--yes")
    assert table.exit_code == 3 and "ab\\udcffc  unknown" in table.output
    for args in (["show", LONE], ["dlq", "show", LONE], ["dlq", "purge", LONE, "--yes"],
                 ["dlq", "requeue", LONE, "--yes"], ["run-now", LONE, "--yes"]):
        found = invoke(app, *args)
        assert found.exit_code == 3 and "Error: UnicodeEncodeError" not in found.output, (args, found.output)


def test_arguments_with_a_lone_surrogate_run_as_plain_celery_runs_them(apps: AppFactory) -> None:
    # Kombu's JSON writes a lone surrogate as an escape, and the worker reads it back: so does the store.
    app = apps()
    timed = app.tasks["t.record"].apply_async(kwargs={"tag": LONE}, countdown=0.2)
    found = celery_zset_scheduler.lookup(app, timed.id)
    assert found is not None and found[1] is not None and LONE in found[1].headers["kwargsrepr"]
    bulk = celery_zset_scheduler.schedule_many(app.tasks["t.record"], [((), {"tag": LONE}, 0.2)])
    apps.dispatcher(app)
    apps.worker(app)
    assert timed.get(timeout=20) == LONE
    assert app.AsyncResult(bulk[0]).get(timeout=20) == LONE


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://:s3cret@127.0.0.1:63 79/0", "zset_scheduler_url: the port must be a number from 1 to 65535"),
        ("redis://127.0.0.1:99999/0", "zset_scheduler_url: the port must be a number from 1 to 65535, got 99999"),
        ("redis://127.0.0.1:6379/zero", "zset_scheduler_url: the database after the host must be a number"),
        ("redis://127.0.0.1:6379/0?socket_timeout=soon",
         r"invalid Redis URL redis://127\.0\.0\.1:6379/0\?socket_timeout=soon: Invalid value for 'socket_timeout'"),
    ],
)
def test_a_store_url_redis_py_would_refuse_fails_at_the_call_site(apps: AppFactory, url: str, message: str) -> None:
    app = apps(zset_scheduler_url=url)
    with pytest.raises(ConfigurationError, match=message) as failed:
        app.tasks["t.record"].apply_async(countdown=10)
    assert "s3cret" not in str(failed.value)
    doctor = invoke(app, "doctor")
    assert doctor.exit_code in (1, 5) and "Traceback" not in doctor.output and "s3cret" not in doctor.output


def test_a_message_over_the_size_limit_is_refused_at_the_call_naming_the_setting(apps: AppFactory) -> None:
    app = apps(zset_scheduler_max_message_bytes=50_000)
    task = app.tasks["t.record"]
    message = (r"message is [\d,]+ bytes, more than zset_scheduler_max_message_bytes \(50,000 bytes\); "
               "nothing was stored")
    small = task.apply_async(kwargs={"pad": "x" * 40_000}, countdown=30)  # Celery's path; the lane learns it
    lane = installation_for(app).lane  # type: ignore[union-attr]
    for call in (
        lambda: task.apply_async(kwargs={"pad": "y" * 60_000}, countdown=30),  # the lane
        lambda: app.send_task("t.record", kwargs={"pad": "z" * 60_000}, countdown=30),  # Celery's path
        lambda: celery_zset_scheduler.schedule_many(task, [((), {"pad": "w"}, 30), ((), {"pad": "v" * 60_000}, 30)]),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    assert lane.taken == 0  # the lane's refused call is not counted
    assert pending(apps.store(app)) == 1  # the small one; not the small entry of the refused bulk chunk
    assert celery_zset_scheduler.lookup(app, small.id) is not None
    task.apply_async(kwargs={"pad": "y"}, countdown=30)
    assert lane.taken == 1  # the lane was the path those calls took


def test_the_default_limit_is_64_mib(apps: AppFactory) -> None:
    app = apps()
    task = app.tasks["t.record"]
    with pytest.raises(ValueError, match=r"more than zset_scheduler_max_message_bytes \(67,108,864 bytes\)"):
        task.apply_async(kwargs={"pad": "x" * (64 << 20)}, countdown=30)
    assert pending(apps.store(app)) == 0
