"""``celery zset dlq ls|show|requeue|purge`` and the dead-letter API behind them, on a real Redis."""

from __future__ import annotations

import base64
import logging
import time

import pytest

from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.errors import PoisonMessage
from celery_zset_scheduler.model.clock import time_ms as redis_ms
from celery_zset_scheduler.model.codec import decode
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.model.times import iso

from ..support.cli_support import dead_letter, invoke, out, template, with_id
from ..support.helpers import AppFactory, wait_for
from ..support.tools import iter_letters, pending

LETTER_KEYS = {"id", "task", "reason", "exc_type", "exc_message", "attempts", "dead_lettered_ms", "dead_lettered"}


def letters_of(app: object) -> list[str]:
    return [x.task_id for x in iter_letters(ensure_installation(app).dead_letters)]


def tie(app: object, ids: list[str]) -> None:
    """Give these dead letters one dead-lettered time, as a burst within one millisecond would."""
    dl = ensure_installation(app).dead_letters
    dl.client.zadd(dl.keys.dlq_index, dict.fromkeys(ids, redis_ms(dl.client.time())), xx=True)


def test_dlq_ls_pages_newest_first_and_filters(apps: AppFactory) -> None:
    app = apps()
    base = template(app, tag="x")
    added = []
    for i in range(10):
        name = "t.other" if i in (2, 5, 8) else "t.record"
        dead_letter(app, with_id(base, f"dead-{i}", name))
        added.append(f"dead-{i}")
        time.sleep(0.003)  # distinct dead-lettered times
    seen, cursor = [], None
    while True:
        page = out(invoke(app, "dlq", "ls", "--json", "--limit", "3", *(["--cursor", cursor] if cursor else [])))
        assert len(page["dead_letters"]) <= 3
        seen += page["dead_letters"]
        cursor = page["cursor"]
        if cursor is None:
            break
    assert [x["id"] for x in seen] == added[::-1]
    assert set(seen[0]) == LETTER_KEYS
    assert seen[0]["reason"] == "retries_exhausted" and seen[0]["exc_type"] == "ValueError"
    assert seen[0]["attempts"] == 4
    other = out(invoke(app, "dlq", "ls", "--json", "--task", "t.other"))
    assert [x["id"] for x in other["dead_letters"]] == ["dead-8", "dead-5", "dead-2"]
    since = seen[3]["dead_lettered"]  # dead-6
    newer = out(invoke(app, "dlq", "ls", "--json", "--after", since))
    assert [x["id"] for x in newer["dead_letters"]] == ["dead-9", "dead-8", "dead-7", "dead-6"]
    older = out(invoke(app, "dlq", "ls", "--json", "--before", since, "--task", "t.record"))
    assert [x["id"] for x in older["dead_letters"]] == ["dead-6", "dead-4", "dead-3", "dead-1", "dead-0"]
    text = invoke(app, "dlq", "ls", "--limit", "2")
    assert text.exit_code == 0 and "dead-9" in text.output and "ValueError: boom" in text.output
    assert "--cursor" in text.output


def test_dlq_on_an_empty_store(apps: AppFactory) -> None:
    app = apps()
    assert out(invoke(app, "dlq", "ls", "--json")) == {"dead_letters": [], "cursor": None, "scanned": 0}
    assert "no dead letters match" in invoke(app, "dlq", "ls").output
    assert invoke(app, "dlq", "purge", "--all", "--yes", "--json").exit_code == 0
    assert out(invoke(app, "dlq", "requeue", "--all", "--yes", "--json"))["counts"] == {}


def test_dlq_show(apps: AppFactory) -> None:
    app = apps()
    letter = dead_letter(app, with_id(template(app, tag="shown"), "dead-1"))
    data = out(invoke(app, "dlq", "show", "dead-1", "--json"))
    assert data["id"] == "dead-1" and data["task"] == "t.record" and data["worker"] == "celery@test"
    assert data["traceback"] == letter.traceback and data["kwargs"] == {"tag": "dead"}
    assert data["message"]["kwargs"] == {"tag": "shown"} and data["message"]["routing"]["queue"] == "celery"
    assert data["error"] is None
    text = invoke(app, "dlq", "show", "dead-1")
    assert text.exit_code == 0 and "ValueError: boom" in text.output and "Traceback" in text.output
    missing = invoke(app, "dlq", "show", "nope")
    assert missing.exit_code == 3 and missing.output.strip() == "Error: no dead letter with id 'nope'"


def test_requeue_runs_the_task_again_with_attempts_reset(apps: AppFactory, caplog: pytest.LogCaptureFixture) -> None:
    app = apps()
    message = template(app, tag="again")
    message = message.with_headers(retries=3)
    dead_letter(app, message)
    assert invoke(app, "dlq", "requeue", message.task_id, input="n\n").exit_code == 4
    assert letters_of(app) == [message.task_id]
    with caplog.at_level(logging.INFO, logger="celery_zset_scheduler"):
        data = out(invoke(app, "dlq", "requeue", message.task_id, "--yes", "--json"))
    assert data == {"action": "requeue", "results": [{"id": message.task_id, "status": "requeued"}],
                    "counts": {"requeued": 1}}
    assert any("dlq.requeued" in r.getMessage() for r in caplog.records)
    assert letters_of(app) == []
    store = apps.store(app)
    entry = store.get(message.task_id)
    assert entry is not None and entry.state == "pending" and entry.score_ms <= redis_ms(store.client.time())
    assert entry.payload is not None and decode(entry.task_id, entry.payload).headers["retries"] == 0
    apps.dispatcher(app)
    apps.worker(app)
    runs = wait_for(apps.executions, what="the requeued task running")
    assert [(r["id"], r["tag"], r["retries"]) for r in runs] == [(message.task_id, "again", 0)]


def test_requeue_statuses_unknown_undecodable_and_already_pending(apps: AppFactory) -> None:
    app = apps()
    dl = ensure_installation(app).dead_letters
    dl.add(DeadLetter.for_poison("poison-1", b"not a message", PoisonMessage("bad"), 0))
    pending = app.tasks["t.record"].apply_async(countdown=600)
    found = ensure_installation(app).store.get(pending.id)
    assert found is not None and found.payload is not None
    dead_letter(app, decode(pending.id, found.payload))
    result = invoke(app, "dlq", "requeue", "poison-1", pending.id, "ghost", "--yes", "--json")
    assert result.exit_code == 3
    assert out(result)["results"] == [
        {"id": "poison-1", "status": "undecodable"}, {"id": pending.id, "status": "pending"},
        {"id": "ghost", "status": "unknown"},
    ]
    assert sorted(letters_of(app)) == sorted(["poison-1", pending.id])  # left for people to look at
    assert base64.b64decode(dl.get("poison-1").message) == b"not a message"  # type: ignore[union-attr]


def test_requeue_by_task_name_at_a_later_time(apps: AppFactory) -> None:
    app = apps()
    base = template(app)
    for i in range(4):
        dead_letter(app, with_id(base, f"other-{i}", "t.other"))
        dead_letter(app, with_id(base, f"record-{i}"))
    started = time.time()
    assert invoke(app, "dlq", "requeue", "--task", "t.other", "--countdown", "3600", input="n\n").exit_code == 4
    data = out(invoke(app, "dlq", "requeue", "--task", "t.other", "--countdown", "3600", "--yes", "--json"))
    assert data == {"action": "requeue", "results": [], "counts": {"requeued": 4}}
    store = apps.store(app)
    for i in range(4):
        entry = store.get(f"other-{i}")
        assert entry is not None and abs(entry.score_ms / 1000 - (started + 3600)) < 5
        assert store.get(f"record-{i}") is None
    assert sorted(letters_of(app)) == [f"record-{i}" for i in range(4)]
    assert invoke(app, "dlq", "requeue", "record-0", "--task", "t.record").exit_code == 2  # ids or selection


def test_requeue_a_selection_with_ties_takes_exactly_the_selection(apps: AppFactory) -> None:
    app = apps()
    base = template(app)
    ids = [f"id-{i:05d}" for i in range(1100)]
    for i, task_id in enumerate(ids):  # newest first = id order reversed; every other is t.other
        dead_letter(app, with_id(base, task_id, "t.other" if i % 2 == 0 else "t.record"))
    tie(app, ids)
    data = out(invoke(app, "dlq", "requeue", "--task", "t.other", "--eta", "+1h", "--yes", "--json"))
    assert data["counts"] == {"requeued": 550}
    assert pending(apps.store(app)) == 550
    assert sorted(letters_of(app)) == ids[1::2]


def test_purge(apps: AppFactory) -> None:
    app = apps()
    base = template(app)
    ids = [f"id-{i:05d}" for i in range(1200)]
    for i, task_id in enumerate(ids):
        dead_letter(app, with_id(base, task_id, "t.other" if i % 2 == 0 else "t.record"))
    tie(app, ids)
    refused = invoke(app, "dlq", "purge", "--task", "t.other", input="n\n")
    assert refused.exit_code == 4 and len(letters_of(app)) == 1200
    assert "every dead letter of task 't.other'" in refused.output
    data = out(invoke(app, "dlq", "purge", "--task", "t.other", "--yes", "--json"))
    assert data == {"action": "purge", "results": [], "counts": {"purged": 600}}
    assert sorted(letters_of(app)) == ids[1::2]
    by_id = invoke(app, "dlq", "purge", ids[1], "ghost", "--yes", "--json")
    assert by_id.exit_code == 3
    assert out(by_id)["results"] == [{"id": ids[1], "status": "purged"}, {"id": "ghost", "status": "unknown"}]
    all_question = invoke(app, "dlq", "purge", "--all", input="n\n")
    assert "599 dead letter(s)" in all_question.output
    assert out(invoke(app, "dlq", "purge", "--all", "--yes", "--json"))["counts"] == {"purged": 599}
    assert letters_of(app) == []


def test_purge_by_time(apps: AppFactory) -> None:
    app = apps()
    base = template(app)
    dead_letter(app, with_id(base, "old"))
    time.sleep(0.05)
    cut = redis_ms(ensure_installation(app).store.client.time())
    time.sleep(0.05)
    dead_letter(app, with_id(base, "new"))
    assert invoke(app, "dlq", "purge").exit_code == 2  # nothing selected
    data = out(invoke(app, "dlq", "purge", "--before", iso(cut), "--yes", "--json"))
    assert data["counts"] == {"purged": 1} and letters_of(app) == ["new"]
