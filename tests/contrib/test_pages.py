"""Every admin page of the store, and who may see it: anonymous users are sent to the login page,
staff without our permissions get 403, the view permission shows pages without any action, the
change permission shows the actions. On a store of 100,000+ scheduled tasks."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from celery_zset_scheduler.store.snapshot import redis_now_ms

from .conftest import ADMIN, BigStore, Users, dead, fill

PAGES = [
    f"{ADMIN}/overview/",
    f"{ADMIN}/scheduledtask/",
    f"{ADMIN}/scheduledtask/?task=shop.remind&shard=1",
    f"{ADMIN}/deadletter/",
    f"{ADMIN}/deadletter/?reason=retries_exhausted",
    f"{ADMIN}/deadletter/dead-7/change/",
]


def detail_of_a_pending_task(big: BigStore) -> str:
    page = big.store.page(0, limit=1)
    return f"{ADMIN}/scheduledtask/{page.entries[0].task_id}/change/"


def client_for(user: Any) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_and_non_staff_users_are_sent_to_the_login_page(users: Users, url: str) -> None:
    for user in (users.anonymous, users.outsider):
        response = client_for(user).get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/?next=")


@pytest.mark.parametrize("url", PAGES)
def test_staff_without_our_permissions_gets_403(users: Users, url: str) -> None:
    assert client_for(users.staff).get(url).status_code == 403


def test_staff_without_permissions_does_not_see_the_app_on_the_index(users: Users) -> None:
    page = client_for(users.staff).get("/admin/").content.decode()
    assert "Scheduled tasks" not in page
    page = client_for(users.viewer).get("/admin/").content.decode()
    assert "Scheduled tasks" in page and "Dead letters" in page and "Overview" in page


@pytest.mark.parametrize("url", [*PAGES, "detail"])
def test_the_view_permission_shows_each_page_without_any_action(big: BigStore, users: Users, url: str) -> None:
    url = detail_of_a_pending_task(big) if url == "detail" else url
    response = client_for(users.viewer).get(url)
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="action"' not in page and 'name="_selected_action"' not in page
    assert 'class="breadcrumbs"' in page  # Django's admin look


@pytest.mark.parametrize("url", [f"{ADMIN}/scheduledtask/", f"{ADMIN}/deadletter/", "detail",
                                 f"{ADMIN}/deadletter/dead-7/change/"])
def test_the_change_permission_shows_the_actions(big: BigStore, users: Users, url: str) -> None:
    url = detail_of_a_pending_task(big) if url == "detail" else url
    page = client_for(users.changer).get(url).content.decode()
    assert 'name="action"' in page and 'name="csrfmiddlewaretoken"' in page


def test_the_overview_shows_every_shard_the_totals_and_the_dead_letters(big: BigStore, as_changer: Client) -> None:
    page = as_changer.get(f"{ADMIN}/overview/").content.decode()
    shards = page[page.index('id="zset-shards"'):page.index('id="zset-dispatchers"')]
    rows = re.findall(r"<tr><td class=\"right\">(\d+)</td>", shards)
    assert rows == ["0", "1", "2", "3"]
    pending = big.store.client.zcard  # the numbers are the store's, read live
    total = sum(pending(big.store.keys.shard(s).due) for s in range(4))
    assert f">{total:,}<" in page
    assert "Dispatchers alive: 0" in page
    assert "in this app's <code>beat_schedule</code> (cleanup)" in page
    live = sum(big.store.client.hlen(big.store.keys.shard(s).shared) for s in range(4))
    assert live >= 1
    assert (f'Shared prefixes</th><td class="right">{live:,} in use, 0 set aside, 0 to delete; '
            "not collected yet") in page
    refreshed = as_changer.get(f"{ADMIN}/overview/?refresh=5").content.decode()
    assert '<meta http-equiv="refresh" content="5">' in refreshed


def test_scheduled_tasks_are_listed_by_due_time_and_paged_by_cursor(big: BigStore, as_changer: Client) -> None:
    first = as_changer.get(f"{ADMIN}/scheduledtask/").content.decode()
    ids = re.findall(r'name="_selected_action" value="([^"]+)"', first)
    assert len(ids) == 100
    dues = re.findall(r'<td class="nowrap" title="(\d{4}-\d\d-\d\dT[^"]+Z)">', first)
    assert dues == sorted(dues) and len(dues) == 100
    assert re.search(r"[\d,]{7,} scheduled tasks", first)  # 100,000 and more, counted by ZCOUNT
    next_url = re.search(r'href="(\?cursor=[^"]+)" class="zset-next"', first)
    assert next_url is not None
    second = as_changer.get(f"{ADMIN}/scheduledtask/" + next_url.group(1).replace("&amp;", "&")).content.decode()
    more = re.findall(r'name="_selected_action" value="([^"]+)"', second)
    assert len(more) == 100 and not set(more) & set(ids)
    assert re.findall(r'<td class="nowrap" title="(\d{4}-\d\d-\d\dT[^"]+Z)">', second)[0] >= dues[-1]


def test_jump_to_a_time_filter_by_task_name_and_shard(big: BigStore, as_changer: Client) -> None:
    charges = fill(big.app, 3, task="shop.charge", countdown=40 * 86_400)  # after every reminder
    page = as_changer.get(f"{ADMIN}/scheduledtask/", {"from": "+39d", "until": "+41d"}).content.decode()
    assert set(re.findall(r'name="_selected_action" value="([^"]+)"', page)) == set(charges)
    wanted = {"task": "shop.charge", "from": "+30d", "until": "+41d"}
    by_name = as_changer.get(f"{ADMIN}/scheduledtask/", wanted).content.decode()
    assert set(re.findall(r'name="_selected_action" value="([^"]+)"', by_name)) == set(charges)
    shard = big.store.keys.shard_of(charges[0])
    one = as_changer.get(f"{ADMIN}/scheduledtask/", {"shard": shard, "from": "+39d", "until": "+41d"}).content.decode()
    listed = re.findall(r'name="_selected_action" value="([^"]+)"', one)
    assert charges[0] in listed and all(big.store.keys.shard_of(i) == shard for i in listed)
    bad = as_changer.get(f"{ADMIN}/scheduledtask/", {"from": "next tuesday", "shard": "99"}).content.decode()
    assert "expected an ISO 8601 date-time" in bad and "not one of the store&#x27;s shards 0..3" in bad


def test_a_task_name_filter_reads_a_bounded_number_of_entries_per_page(big: BigStore, as_changer: Client) -> None:
    page = as_changer.get(f"{ADMIN}/scheduledtask/", {"task": "shop.nothing-of-that-name"}).content.decode()
    assert "No scheduled tasks match." in page
    assert "the task filter read 2,000 of them for this page" in page
    assert 'class="zset-next"' in page  # the rest is one click further, never a scan


def test_look_up_a_task_by_id(big: BigStore, as_changer: Client) -> None:
    (task_id,) = fill(big.app, 1, task="shop.charge")
    response = as_changer.get(f"{ADMIN}/scheduledtask/", {"q": task_id})
    assert response.status_code == 302 and response["Location"].endswith(f"/{task_id}/change/")
    missing = as_changer.get(f"{ADMIN}/scheduledtask/", {"q": "no-such-id"}, follow=True).content.decode()
    assert "No pending or in-flight task with ID “no-such-id”." in missing


def test_the_detail_of_a_scheduled_task(big: BigStore, as_changer: Client) -> None:
    (task_id,) = fill(big.app, 1, task="shop.charge", countdown=600)
    page = as_changer.get(f"{ADMIN}/scheduledtask/{task_id}/change/").content.decode()
    for expected in (task_id, "shop.charge", "Shard", "Queue", "Routing key", "Headers", "argsrepr",
                     "user0@example.com", "pending, due ", "in 9m"):
        assert expected in page, expected
    gone = as_changer.get(f"{ADMIN}/scheduledtask/gone-id/change/", follow=True).content.decode()
    assert "Scheduled task with ID “gone-id” does not exist" in gone


def test_dead_letters_newest_first_with_filters_and_detail(big: BigStore, as_changer: Client) -> None:
    newest = dead(big.app, "dl-pages-newest", task="shop.charge", reason="rejected")
    page = as_changer.get(f"{ADMIN}/deadletter/").content.decode()
    ids = re.findall(r'name="_selected_action" value="([^"]+)"', page)
    assert ids[0] == newest.task_id and len(ids) == 100
    rejected = as_changer.get(f"{ADMIN}/deadletter/", {"reason": "rejected"}).content.decode()
    assert re.findall(r'name="_selected_action" value="([^"]+)"', rejected) == [newest.task_id]
    by_task = as_changer.get(f"{ADMIN}/deadletter/", {"task": "shop.charge"}).content.decode()
    assert re.findall(r'name="_selected_action" value="([^"]+)"', by_task) == [newest.task_id]
    later = as_changer.get(f"{ADMIN}/deadletter/", {"since": "+1h"}).content.decode()
    assert "No dead letters match." in later and "0 dead letters" in later
    detail = as_changer.get(f"{ADMIN}/deadletter/{newest.task_id}/change/").content.decode()
    for expected in ("Traceback", "ConnectionError: webhook answered 503", "rejected", "celery@test",
                     "Original message: Routing", "Original message: Headers", "http://127.0.0.1:9/hook"):
        assert expected in detail, expected
    assert big.store.client.ping() and redis_now_ms(big.store) > 0
