"""Actions of the admin pages: every change is a POST with a CSRF token, behind a confirmation
page, allowed only with the change permission, and written to Django's admin log."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.test import Client

from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.model.times import iso
from celery_zset_scheduler.store.snapshot import redis_now_ms

from .conftest import ADMIN, BigStore, Users, dead, fill

SCHEDULED = f"{ADMIN}/scheduledtask/action/"
LETTERS = f"{ADMIN}/deadletter/action/"


def due_of(big: BigStore, task_id: str) -> int | None:
    entry = big.store.get(task_id)
    return None if entry is None else entry.score_ms


def logged(task_id: str | None = None, **fields: Any) -> list[LogEntry]:
    return list(LogEntry.objects.filter(object_id=task_id, **fields))


def unique(task: str) -> str:
    return f"{task}-{uuid.uuid4().hex[:8]}"


# -- who may act ------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "action"), [(SCHEDULED, "cancel"), (SCHEDULED, "run_now"),
                                             (SCHEDULED, "reschedule"), (LETTERS, "requeue"),
                                             (LETTERS, "delete")])
def test_posts_without_the_change_permission_change_nothing(big: BigStore, users: Users, url: str,
                                                            action: str) -> None:
    (task_id,) = fill(big.app, 1)
    letter = dead(big.app, unique("dl-perm"))
    target = letter.task_id if url == LETTERS else task_id
    form = {"action": action, "_selected_action": target, "post": "yes", "due": "+1h"}
    anonymous = Client().post(url, form)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    for user in (users.staff, users.viewer):
        client = Client()
        client.force_login(user)
        assert client.post(url, form).status_code == 403
    assert big.store.get(task_id) is not None and ensure_installation(big.app).dead_letters.get(letter.task_id)
    assert not LogEntry.objects.exists()


def test_a_post_without_the_csrf_token_is_refused_and_a_get_is_not_an_action(big: BigStore, users: Users) -> None:
    (task_id,) = fill(big.app, 1)
    client = Client(enforce_csrf_checks=True)
    client.force_login(users.changer)
    response = client.post(SCHEDULED, {"action": "cancel", "_selected_action": task_id, "post": "yes"})
    assert response.status_code == 403 and b"CSRF" in response.content
    assert big.store.get(task_id) is not None
    assert client.get(SCHEDULED, {"action": "cancel", "_selected_action": task_id, "post": "yes"}).status_code == 405
    assert big.store.get(task_id) is not None


# -- scheduled tasks --------------------------------------------------------------------------

def test_cancel_one_asks_first_then_cancels_and_logs_who_and_which(big: BigStore, users: Users,
                                                                   as_changer: Client) -> None:
    (task_id,) = fill(big.app, 1)
    form = {"action": "cancel", "_selected_action": task_id}
    question = as_changer.post(SCHEDULED, form)
    assert question.status_code == 200
    page = question.content.decode()
    assert "Are you sure you want to cancel the selected scheduled task?" in page and task_id in page
    assert 'name="post" value="yes"' in page and big.store.get(task_id) is not None
    done = as_changer.post(SCHEDULED, {**form, "post": "yes"}, follow=True)
    assert "Cancelled 1 scheduled task." in done.content.decode()
    assert big.store.get(task_id) is None
    (entry,) = logged(task_id)
    assert entry.user == users.changer and entry.action_flag == DELETION and entry.change_message == "Cancelled."


def test_run_now_makes_the_selected_tasks_due_at_redis_time(big: BigStore, as_changer: Client) -> None:
    ids = fill(big.app, 3)
    before = redis_now_ms(big.store)
    as_changer.post(SCHEDULED, {"action": "run_now", "_selected_action": ids, "post": "yes"})
    dues = {due_of(big, i) for i in ids}
    assert len(dues) == 1 and before <= next(iter(dues)) <= redis_now_ms(big.store)  # type: ignore[operator]
    assert all(logged(i, action_flag=CHANGE) for i in ids)


def test_reschedule_validates_the_time_before_changing_anything(big: BigStore, as_changer: Client) -> None:
    ids = fill(big.app, 2)
    old = [due_of(big, i) for i in ids]
    form = {"action": "reschedule", "_selected_action": ids, "post": "yes"}
    for bad in ("next tuesday", "", "+99999999999w"):
        page = as_changer.post(SCHEDULED, {**form, "due": bad}).content.decode()
        assert "Please correct the error below." in page, bad
    assert [due_of(big, i) for i in ids] == old and not logged(ids[0])
    as_changer.post(SCHEDULED, {**form, "due": "2031-05-01T12:00:00Z"})
    assert [due_of(big, i) for i in ids] == [1935403200000] * 2
    (entry,) = logged(ids[0])
    assert entry.change_message == "Rescheduled: due 2031-05-01T12:00:00.000Z."


def test_cancel_every_task_the_filters_select(big: BigStore, users: Users, as_changer: Client) -> None:
    name = unique("shop.victim")
    victims = fill(big.app, 30, task="shop.remind", countdown=3_600)
    keep = fill(big.app, 5, countdown=3_600)
    victims = _renamed(big, victims, name)
    form = {"action": "cancel", "select_across": "1", "task": name, "until": iso(redis_now_ms(big.store) + 7_200_000)}
    page = as_changer.post(SCHEDULED, form).content.decode()
    assert f"every scheduled task matching (task {name}; due until" in page
    done = as_changer.post(SCHEDULED, {**form, "post": "yes"}, follow=True).content.decode()
    assert f"Cancelled 30 scheduled tasks matching (task {name}" in done
    assert all(big.store.get(i) is None for i in victims) and all(big.store.get(i) for i in keep)
    (entry,) = logged(None)
    assert entry.user == users.changer and entry.action_flag == DELETION
    assert name in entry.object_repr and "30 cancelled" in entry.change_message


def test_reschedule_a_selection_by_due_range_and_shard(big: BigStore, as_changer: Client) -> None:
    ids = fill(big.app, 40, countdown=50 * 86_400)  # after everything else
    shard = big.store.keys.shard_of(ids[0])
    mine = [i for i in ids if big.store.keys.shard_of(i) == shard]
    others = [i for i in ids if i not in mine]
    start = due_of(big, ids[0])
    assert start is not None
    form = {"action": "reschedule", "select_across": "1", "shard": str(shard), "from": iso(start),
            "until": iso(start + 100_000), "due": "2040-01-01T00:00:00Z", "post": "yes"}
    as_changer.post(SCHEDULED, form)
    assert all(due_of(big, i) == 2208988800000 for i in mine)
    assert all(due_of(big, i) != 2208988800000 for i in others)


def test_nothing_selected_changes_nothing(as_changer: Client) -> None:
    page = as_changer.post(SCHEDULED, {"action": "cancel", "post": "yes"}, follow=True).content.decode()
    assert "Items must be selected in order to perform actions on them." in page
    assert not LogEntry.objects.exists()


def test_the_next_url_is_followed_only_on_this_site(big: BigStore, as_changer: Client) -> None:
    ids = fill(big.app, 2)
    away = as_changer.post(SCHEDULED, {"action": "run_now", "_selected_action": ids[0], "post": "yes",
                                       "next": "https://elsewhere.example/"})
    assert away["Location"] == f"{ADMIN}/scheduledtask/"
    here = as_changer.post(SCHEDULED, {"action": "run_now", "_selected_action": ids[1], "post": "yes",
                                       "next": f"{ADMIN}/scheduledtask/?task=shop.remind"})
    assert here["Location"] == f"{ADMIN}/scheduledtask/?task=shop.remind"


# -- dead letters -----------------------------------------------------------------------------

def test_requeue_a_dead_letter_now_and_another_at_a_time(big: BigStore, users: Users, as_changer: Client) -> None:
    letters = ensure_installation(big.app).dead_letters
    now_one, later_one = dead(big.app, unique("dl-now")), dead(big.app, unique("dl-later"))
    before = redis_now_ms(big.store)
    page = as_changer.post(LETTERS, {"action": "requeue", "_selected_action": now_one.task_id}).content.decode()
    assert "Are you sure you want to requeue the selected dead letter, due now?" in page
    done = as_changer.post(LETTERS, {"action": "requeue", "_selected_action": now_one.task_id, "post": "yes"},
                           follow=True).content.decode()
    assert "Requeued 1 dead letter, due now." in done
    due = due_of(big, now_one.task_id)
    assert due is not None and before <= due <= redis_now_ms(big.store) and letters.get(now_one.task_id) is None
    as_changer.post(LETTERS, {"action": "requeue_at", "_selected_action": later_one.task_id, "post": "yes",
                              "due": "2035-01-01T00:00:00Z"})
    assert due_of(big, later_one.task_id) == 2051222400000 and letters.get(later_one.task_id) is None
    (entry,) = logged(later_one.task_id)
    assert entry.user == users.changer and entry.change_message == "Requeued, due 2035-01-01T00:00:00.000Z."


def test_delete_selected_dead_letters(big: BigStore, as_changer: Client) -> None:
    letters = ensure_installation(big.app).dead_letters
    doomed = [dead(big.app, unique("dl-del")).task_id for _ in range(3)]
    as_changer.post(LETTERS, {"action": "delete", "_selected_action": doomed, "post": "yes"})
    assert not letters.present(doomed)
    assert all(logged(i, action_flag=DELETION, change_message="Deleted.") for i in doomed)


def test_purge_by_filter_asks_first_then_purges_only_the_match(big: BigStore, as_changer: Client) -> None:
    letters = ensure_installation(big.app).dead_letters
    name = unique("shop.purge")
    doomed = [dead(big.app, unique("dl-purge"), task=name).task_id for _ in range(5)]
    kept = letters.count() - 5
    listing = as_changer.get(f"{ADMIN}/deadletter/", {"task": name}).content.decode()
    assert "Purge all matching…" in listing
    form = {"action": "delete", "select_across": "1", "task": name}
    page = as_changer.post(LETTERS, form).content.decode()
    assert f"Are you sure you want to delete every dead letter matching (task {name})" in page
    assert letters.count() == kept + 5
    done = as_changer.post(LETTERS, {**form, "post": "yes"}, follow=True).content.decode()
    assert f"Purged 5 dead letters matching (task {name})." in done
    assert not letters.present(doomed) and letters.count() == kept
    (entry,) = logged(None, action_flag=DELETION)
    assert name in entry.object_repr


def _renamed(big: BigStore, ids: list[str], name: str) -> list[str]:
    """Store the same messages again under another task name (a filter only these match)."""
    from dataclasses import replace

    from celery_zset_scheduler.model.codec import decode, encode
    from celery_zset_scheduler.store.schedule import NewEntry

    entries = []
    for task_id in ids:
        entry = big.store.get(task_id)
        assert entry is not None and entry.payload is not None
        message = decode(task_id, entry.payload)
        entries.append(NewEntry(task_id, entry.score_ms, encode(replace(message, headers={**message.headers,
                                                                                           "task": name}))))
    big.store.cancel(ids)
    big.store.schedule_many(entries)
    return ids
