"""The actions of the periodic entries page: enable, disable, pause, resume, run now and delete,
on one entry or the checked rows; each asks first, acts through the runtime API (so a running
dispatcher acts on it at once), and is written to Django's admin log. Run now stores an
occurrence that a real dispatcher hands to the broker."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.test import Client

from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
from celery_zset_scheduler.celery.periodic import runtime as periodic
from celery_zset_scheduler.store.snapshot import redis_now_ms
from celery_zset_scheduler.testing import RedisServer

from ..support.helpers import wait_for
from .conftest import ADMIN, BigStore, Users, make_app
from .periodic_support import ACTION, PERIODIC, add, change_url, info, unique


def act(client: Client, action: str, names: list[str], **extra: Any) -> Any:
    """Ask, check the question, then confirm: the two POSTs of an action."""
    form = {"action": action, "_selected_action": names, **extra}
    question = client.post(ACTION, form)
    assert question.status_code == 200 and "Are you sure you want to" in question.content.decode()
    return client.post(ACTION, {**form, "post": "yes"}, follow=True)


def messages_of(response: Any) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def test_disable_and_enable_ask_first_then_act_and_log(big: BigStore, users: Users, as_changer: Client) -> None:
    names = [unique("switched"), unique("switched")]
    for name in names:
        add(big, name)
    page = as_changer.post(ACTION, {"action": "disable", "_selected_action": names}).content.decode()
    assert "Are you sure you want to disable the 2 selected periodic entries?" in page
    assert "what falls due meanwhile is never caught up" in page
    assert all(info(big, n).entry.enabled for n in names)  # asked, not done
    done = as_changer.post(ACTION, {"action": "disable", "_selected_action": names, "post": "yes"}, follow=True)
    assert "Disabled 2 periodic entries." in messages_of(done)
    for name in names:
        state = info(big, name)
        assert not state.entry.enabled and state.state.next_run_ms is None and state.look_ms is None
        (entry,) = LogEntry.objects.filter(object_id=name)
        assert entry.user == users.changer and entry.action_flag == CHANGE and entry.change_message == "Disabled."
    now = redis_now_ms(big.store)
    again = act(as_changer, "enable", [*names, "no-such-entry"])
    text = messages_of(again)
    assert "Enabled 2 periodic entries." in text and "1 periodic entry not found" in text
    for name in names:
        state = info(big, name)
        assert state.entry.enabled and state.state.next_run_ms is not None and state.state.next_run_ms > now
    assert LogEntry.objects.filter(change_message="Enabled.").count() == 2
    unchanged = act(as_changer, "enable", names[:1])
    assert "1 periodic entry left as it was (already enabled)." in messages_of(unchanged)


def test_pause_keeps_the_next_run_and_a_note_resume_gives_it_back(big: BigStore, as_changer: Client) -> None:
    name = unique("held")
    add(big, name)
    before = info(big, name)
    page = as_changer.post(ACTION, {"action": "pause", "_selected_action": name}).content.decode()
    assert 'name="note"' in page and "Are you sure you want to pause the selected periodic entry?" in page
    done = as_changer.post(ACTION, {"action": "pause", "_selected_action": name, "note": "warehouse migration",
                                    "post": "yes", "next": change_url(name)}, follow=True)
    assert done.redirect_chain[-1][0] == change_url(name) and "Paused 1 periodic entry." in messages_of(done)
    paused = info(big, name)
    assert paused.entry.paused and paused.entry.pause_note == "warehouse migration"
    assert paused.state.next_run_ms == before.state.next_run_ms and paused.look_ms is None  # frozen, not fired
    assert "paused: warehouse migration" in done.content.decode() and ">Resume</button>" in done.content.decode()
    (entry,) = LogEntry.objects.filter(object_id=name)
    assert entry.change_message == "Paused: warehouse migration"
    resumed = act(as_changer, "resume", [name])
    assert "Resumed 1 periodic entry." in messages_of(resumed)
    back = info(big, name)
    assert not back.entry.paused and back.entry.pause_note == "" and back.look_ms == before.state.next_run_ms
    assert "left as it was (not paused)" in messages_of(act(as_changer, "resume", [name]))


def test_delete_asks_first_then_removes_and_logs(big: BigStore, users: Users, as_changer: Client) -> None:
    name = unique("doomed")
    add(big, name)
    page = as_changer.post(ACTION, {"action": "delete", "_selected_action": name}).content.decode()
    assert "Are you sure you want to delete the selected periodic entry?" in page and info(big, name)
    done = as_changer.post(ACTION, {"action": "delete", "_selected_action": name, "post": "yes"}, follow=True)
    assert "Deleted 1 periodic entry." in messages_of(done) and periodic.get(big.app, name) is None
    assert done.redirect_chain[-1][0] == f"{PERIODIC}/"
    (entry,) = LogEntry.objects.filter(object_id=name)
    assert entry.user == users.changer and entry.action_flag == DELETION


def test_run_now_stores_an_occurrence_due_now_and_keeps_the_schedule(big: BigStore, users: Users,
                                                                     as_changer: Client) -> None:
    name = unique("urgent")
    add(big, name, every=86_400.0)
    before = info(big, name)
    start = redis_now_ms(big.store)
    done = act(as_changer, "run_now", [name])
    assert "Run now (due now): 1 periodic entry." in messages_of(done)
    after = info(big, name)
    task_id = after.state.last_task_id
    assert task_id is not None and after.state.total_run_count == 1
    assert after.state.next_run_ms == before.state.next_run_ms  # the schedule did not move
    stored = big.store.get(task_id)
    assert stored is not None and start <= stored.score_ms <= redis_now_ms(big.store)
    (entry,) = LogEntry.objects.filter(object_id=name)
    assert entry.user == users.changer and entry.change_message == f"Run now: task {task_id}."


def test_a_selection_across_pages_and_unknown_actions_change_nothing(big: BigStore, as_changer: Client) -> None:
    name = unique("across")
    add(big, name)
    across = as_changer.post(ACTION, {"action": "disable", "select_across": "1", "post": "yes"}, follow=True)
    assert "changed by name" in messages_of(across) and info(big, name).entry.enabled
    nothing = as_changer.post(ACTION, {"action": "disable", "post": "yes"}, follow=True)
    assert "Items must be selected" in messages_of(nothing)
    unknown = as_changer.post(ACTION, {"action": "drop_table", "_selected_action": name, "post": "yes"}, follow=True)
    assert "No action selected." in messages_of(unknown) and not LogEntry.objects.exists()


def test_run_now_from_the_admin_is_handed_to_the_broker_by_a_real_dispatcher(users: Users, settings: Any) -> None:
    with RedisServer() as server:
        app = make_app(server, "zrun", prefix="zr")
        app.conf.beat_schedule = {}
        settings.CELERY_ZSET_ADMIN_APP = app
        client = Client()
        client.force_login(users.changer)
        periodic.add(app, "nightly", "shop.charge", 86_400.0, kwargs={"order_id": 7, "cents": 1250})
        dispatcher = build_dispatcher(app)
        thread = threading.Thread(target=dispatcher.run, daemon=True)
        thread.start()
        try:
            broker = server.client(1)
            act(client, "run_now", ["nightly"])
            found = periodic.get(app, "nightly")
            assert found is not None and found.state.last_task_id is not None
            task_id = found.state.last_task_id
            wait_for(lambda: broker.llen("celery") >= 1, timeout=20, what="the occurrence in the broker's queue")
            message = json.loads(broker.lindex("celery", 0))
            assert message["headers"]["id"] == task_id and message["headers"]["task"] == "shop.charge"
            assert message["headers"]["zset_periodic"] == "nightly"
            store = ensure_installation(app).store
            assert store.get(task_id) is None  # handed over: no longer in the store
            overview = client.get(f"{ADMIN}/overview/").content.decode()
            table = overview[overview.index('id="zset-periodic"'):overview.index('id="zset-summary"')]
            assert f"<td>{dispatcher.member_id}</td>" in table  # the leader that fires the shard's entries
        finally:
            dispatcher.stop()
            thread.join(timeout=30)


@pytest.mark.parametrize("button", ["run_now", "disable", "pause", "delete"])
def test_the_buttons_of_the_change_page_are_the_actions(big: BigStore, as_changer: Client, button: str) -> None:
    name = unique("buttons")
    add(big, name)
    page = as_changer.get(change_url(name)).content.decode()
    assert f'name="action" value="{button}"' in page
    done = act(as_changer, button, [name])
    assert done.status_code == 200 and LogEntry.objects.filter(object_id=name).count() == 1
