"""I6's exception, with real worker processes: a body paused past its lease resumes and completes
while a redelivery of its key runs too. Both get fencing tokens, the stale one's is lower, and the
stale completion is an error, counted in the store's stats."""

from __future__ import annotations

import json
import signal
import time

from celery_zset_scheduler.store.idempotency import LEASE_LOST_COMPLETIONS
from celery_zset_scheduler.testing import RedisServer

from ..support.cli_support import invoke
from ..support.helpers import AppFactory, wait_for
from ..support.procs import Cluster

LEASE = 2.0  # t.charge's idempotency_lease


def test_a_body_paused_past_its_lease_gets_a_lower_token_and_its_completion_is_reported(
        apps: AppFactory, redis_server: RedisServer) -> None:
    app = apps()
    charge = app.tasks["t.charge"]  # idempotency_key="charge:{order_id}"
    cluster = Cluster(redis_server)
    try:
        stale = cluster.worker("-n", "stale@test")  # consumes "celery"
        cluster.worker("-n", "fresh@test", "-Q", "redelivery")  # takes the redelivery

        def runs(tag: str) -> list[dict[str, object]]:
            return [r for r in apps.executions() if r["tag"] == tag]

        charge.apply_async(kwargs={"order_id": 1, "amount": 10, "sleep": 4.5})
        (first,) = wait_for(lambda: runs("charge.started"), timeout=60, what="the first body running")
        stale.signal(signal.SIGSTOP)  # paused mid-body: its lease renewals stop too
        time.sleep(LEASE + 1.0)
        # The same key delivered again (as after a redelivery) while the first body is paused.
        redelivered = charge.apply_async(kwargs={"order_id": 1, "amount": 10}, queue="redelivery")
        assert redelivered.get(timeout=30) == {"order_id": 1, "charged": 10}
        stale.signal(signal.SIGCONT)
        wait_for(lambda: len(runs("charge.done")) == 2, timeout=30, what="the paused body completing")
        stale.wait_for_output(r"idempotency\.completed_after_lease_lost", timeout=20)
        stale_output = stale.output
    finally:
        cluster.close()
    started = {r["pid"]: r["token"] for r in runs("charge.started")}
    second = next(r for r in runs("charge.started") if r["pid"] != first["pid"])
    assert len(started) == 2 and all(isinstance(t, int) and t > 0 for t in started.values())
    assert first["token"] < second["token"]  # the stale writer is the one with the lower token
    line = next(line for line in stale_output.splitlines() if "completed_after_lease_lost" in line)
    assert "ERROR" in line and "key=charge:1" in line and f"token={first['token']}" in line
    assert apps.server.client(0).hget("zt:stats", LEASE_LOST_COMPLETIONS) == b"1"
    # The redelivery's outcome is the one recorded: the stale completion overwrote nothing.
    record = apps.server.client(0).hgetall("zt:idem:charge:1")
    assert int(record[b"token"]) == second["token"] and b"fresh@test" in record[b"owner"]
    status = invoke(app, "status", "--json")
    assert json.loads(status.stdout)["stats"] == {LEASE_LOST_COMPLETIONS: 1}
    assert "idempotency lease lost completions: 1" in invoke(app, "status").output
