"""A store user without a permission the dispatcher would use: a configuration problem said once,
not an outage; the dispatcher goes on with what it may do (real redis-server, a real ACL user)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import AppFactory, wait_for

PASSWORD = "acl-pw"


@pytest.fixture
def acl_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        # Every key and command but the dangerous ones (INFO among them), and no channel: what a
        # new Redis 7 user gets unless its rules name channels.
        server.client().execute_command("ACL", "SETUSER", "zs", "on", f">{PASSWORD}", "~*", "resetchannels",
                                        "+@all", "-@dangerous")
        yield server


def test_no_channel_and_no_info_the_dispatcher_polls_and_takes_the_generic_path(
    acl_server: RedisServer, apps: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:  # the server first: torn down after the worker and the dispatcher
    caplog.set_level(logging.INFO, logger="celery_zset_scheduler")
    app = apps(broker_url=acl_server.url_db(0), result_backend=None,
               zset_scheduler_url=f"redis://zs:{PASSWORD}@127.0.0.1:{acl_server.port}/0")
    apps.worker(app)
    apps.dispatcher(app)
    ids = [app.tasks["t.record"].apply_async(kwargs={"tag": i}, countdown=0.3 + i * 0.2).id for i in range(5)]
    wait_for(lambda: set(ids) <= {r["id"] for r in apps.executions()}, timeout=30, what="every task to run")
    events = [r.getMessage() for r in caplog.records if r.name.startswith("celery_zset_scheduler")]
    refused = [e for e in events if "config.refused" in e]
    assert len(refused) == 3, refused  # each cause said once, not at every pass
    (channel,) = [e for e in refused if "SUBSCRIBE zt:wake" in e]
    assert "grant=&zt:wake" in channel and "polling" in channel
    (revokes,) = [e for e in refused if "SUBSCRIBE zt:revokes" in e]  # the worker's: it reads the records
    assert "grant=&zt:revokes" in revokes and "every 5 s" in revokes
    (collect,) = [e for e in refused if "collecting the shared prefixes" in e]
    assert "grant=+info" in collect
    assert not [e for e in events if "outage.started" in e], events
    off = [e for e in events if "fast_path.off" in e]
    assert len(off) == 1 and "may not run" in off[0] and "+info" in off[0], off
    assert PASSWORD not in caplog.text


def test_doctor_reports_each_check_it_could_not_make_and_never_says_unreachable(
    acl_server: RedisServer, apps: AppFactory
) -> None:
    from ..support.cli_support import invoke, out

    app = apps(broker_url=acl_server.url_db(0), result_backend=None,
               zset_scheduler_url=f"redis://zs:{PASSWORD}@127.0.0.1:{acl_server.port}/0")
    data = out(invoke(app, "doctor", "--json"))
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["redis"]["status"] == "warn"
    assert "reached Redis at redis://zs:***@" in checks["redis"]["detail"] and "'info'" in checks["redis"]["detail"]
    assert "cannot reach" not in str(data)
    # The checks it could make were made.
    assert checks["shards"]["status"] == "ok" and checks["clock"]["status"] == "ok"
    assert checks["broker"]["status"] == "ok"
    assert PASSWORD not in str(data)
