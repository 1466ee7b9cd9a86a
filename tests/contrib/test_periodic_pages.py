"""The periodic entries pages and who may use them: anonymous users go to the login page, staff
without our permissions get 403, the view permission shows the pages without any action (and
every POST is refused), the change permission adds the form and the actions. The listing shows
next run, last run and run count, a page at a time."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.test import Client

from celery_zset_scheduler.celery.periodic import runtime as periodic
from celery_zset_scheduler.model.periodic import PeriodicState
from celery_zset_scheduler.model.times import iso
from celery_zset_scheduler.store.periodic import PeriodicStore
from celery_zset_scheduler.store.snapshot import redis_now_ms

from .conftest import ADMIN, BigStore, Users
from .periodic_support import ACTION, ADD, PERIODIC, add, change_url, client_for, form, info, listed, unique

GETS = [f"{PERIODIC}/", f"{PERIODIC}/cleanup/change/", ADD]


def posts(name: str) -> list[tuple[str, dict[str, Any]]]:
    """Every kind of change a POST can ask for, on the entry ``name``."""
    return [
        (ADD, form(unique("refused"))),
        (change_url(name), form(name, description="refused edit")),
        *[(ACTION, {"action": a, "_selected_action": name, "post": "yes"})
          for a in ("run_now", "enable", "disable", "pause", "resume", "delete")],
    ]


@pytest.mark.parametrize("url", GETS)
def test_anonymous_and_non_staff_users_are_sent_to_the_login_page(users: Users, url: str) -> None:
    for user in (users.anonymous, users.outsider):
        response = client_for(user).get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/?next=")


@pytest.mark.parametrize("url", GETS)
def test_staff_without_our_permissions_gets_403(users: Users, url: str) -> None:
    assert client_for(users.staff).get(url).status_code == 403


def test_no_post_without_the_change_permission_changes_anything(big: BigStore, users: Users) -> None:
    name = unique("guarded")
    add(big, name)
    before = info(big, name)
    for user, expected in ((users.anonymous, 302), (users.outsider, 302), (users.staff, 403), (users.viewer, 403)):
        client = client_for(user)
        for url, data in posts(name):
            response = client.post(url, data)
            assert response.status_code == expected, (user, url, data.get("action"))
    after = info(big, name)
    assert after.entry == before.entry and after.state == before.state
    assert not LogEntry.objects.exists()


def test_a_post_without_the_csrf_token_is_refused(big: BigStore, users: Users) -> None:
    name = unique("csrf")
    add(big, name)
    client = Client(enforce_csrf_checks=True)
    client.force_login(users.changer)
    before = info(big, name)
    for url, data in posts(name):
        response = client.post(url, data)
        assert response.status_code == 403 and b"CSRF" in response.content, url
    after = info(big, name)
    assert after.entry == before.entry and after.state == before.state and not LogEntry.objects.exists()
    assert client.get(ACTION, {"action": "run_now", "_selected_action": name, "post": "yes"}).status_code == 405


def test_the_view_permission_shows_the_pages_without_any_action(big: BigStore, users: Users) -> None:
    name = unique("viewed")
    add(big, name, description="seen, not touched")
    viewer = client_for(users.viewer)
    index = viewer.get("/admin/").content.decode()
    assert "Periodic entries" in index and f"{PERIODIC}/add/" not in index
    listing = viewer.get(f"{PERIODIC}/").content.decode()
    assert 'name="action"' not in listing and 'name="_selected_action"' not in listing and "addlink" not in listing
    assert f'href="{change_url(name)}"' in listing
    page = viewer.get(change_url(name)).content.decode()
    assert 'id="periodicentry_form"' not in page and 'name="action"' not in page
    for expected in ("State", "Definition", "seen, not touched", "every 1h", "ops@example.com"):
        assert expected in page, expected
    assert viewer.get(ADD).status_code == 403


def test_the_change_permission_shows_the_form_and_the_actions(big: BigStore, users: Users) -> None:
    name = unique("changeable")
    add(big, name)
    changer = client_for(users.changer)
    index = changer.get("/admin/").content.decode()
    assert f'href="{PERIODIC}/add/"' in index  # Django's "+ Add" link
    listing = changer.get(f"{PERIODIC}/").content.decode()
    assert 'name="action"' in listing and f'href="{ADD}" class="addlink"' in listing
    assert "Select all" not in listing.replace("Select all on this page", "")  # by name, never across pages
    page = changer.get(change_url(name)).content.decode()
    assert 'id="periodicentry_form"' in page and 'name="csrfmiddlewaretoken"' in page
    for button in ("Run now", "Disable", "Pause…", "Delete"):
        assert f">{button}</button>" in page, button
    assert 'id="periodicentry_form"' in changer.get(ADD).content.decode()


def test_entries_are_listed_by_name_with_next_run_last_run_and_run_count(big: BigStore, as_changer: Client) -> None:
    now = redis_now_ms(big.store)
    prefix = unique("aaa-listed")  # sorts before the other tests' entries: on the first page
    periodic.add(big.app, f"{prefix}-1", "shop.charge", 60.0, kwargs={"order_id": 1, "cents": 100})
    imported = periodic.PeriodicEntry(name=f"{prefix}-2", task="shop.cleanup",
                                      schedule={"type": "interval", "every": 600.0})
    periodic.add_entry(big.app, imported, state=PeriodicState(last_run_ms=now - 120_000, total_run_count=41))
    periodic.pause(big.app, f"{prefix}-2", note="warehouse migration")
    page = as_changer.get(f"{PERIODIC}/").content.decode()
    names = listed(page)
    assert names == sorted(names, key=lambda n: n.encode()) and names[:2] == [f"{prefix}-1", f"{prefix}-2"]
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)
    first = next(r for r in rows if f"{prefix}-1" in r)
    second = next(r for r in rows if f"{prefix}-2" in r)
    nxt = info(big, f"{prefix}-1").state.next_run_ms
    assert nxt is not None and iso(nxt)[:19].replace("T", " ") in first  # type: ignore[index]
    for expected in ("shop.charge", "every 1m", ">enabled<", ">in ", ">0<", "runtime"):
        assert expected in first, expected
    last = iso(now - 120_000)
    assert last is not None and last[:19].replace("T", " ") in second
    assert ">41<" in second and 'title="warehouse migration">paused<' in second
    total = sum(c.entries for c in PeriodicStore(big.store).counts())
    assert f"{total:,} periodic entr" in page


def test_the_listing_is_paged_by_cursor(big: BigStore, as_changer: Client, settings: Any) -> None:
    settings.CELERY_ZSET_ADMIN_PAGE_SIZE = 10
    prefix = unique("paged")
    periodic.add_many(big.app, [periodic.PeriodicEntry(name=f"{prefix}-{i:02}", task="shop.cleanup",
                                                       schedule={"type": "interval", "every": 60.0})
                                for i in range(25)])
    seen: list[str] = []
    url: str | None = f"{PERIODIC}/"
    while url is not None:
        page = as_changer.get(url).content.decode()
        names = listed(page)
        assert len(names) <= 10 and names == sorted(names, key=lambda n: n.encode())
        assert not set(names) & set(seen) and (not seen or names[0].encode() > seen[-1].encode())
        seen += names
        found = re.search(r'href="(\?cursor=[^"]+)" class="zset-next"', page)
        url = f"{PERIODIC}/" + found.group(1).replace("&amp;", "&") if found else None
    assert [n for n in seen if n.startswith(prefix)] == [f"{prefix}-{i:02}" for i in range(25)]
    bad = as_changer.get(f"{PERIODIC}/", {"cursor": "nonsense"}).content.decode()
    assert "showing the first page" in bad and len(listed(bad)) == 10


def test_look_up_an_entry_by_name(big: BigStore, as_changer: Client) -> None:
    name = unique("wanted")
    add(big, name)
    response = as_changer.get(f"{PERIODIC}/", {"q": name})
    assert response.status_code == 302 and response["Location"] == change_url(name)
    missing = as_changer.get(f"{PERIODIC}/", {"q": "no-such-entry"}, follow=True).content.decode()
    assert "No periodic entry named “no-such-entry”." in missing
    gone = as_changer.get(change_url("gone-entry"), follow=True).content.decode()
    assert "Periodic entry “gone-entry” does not exist" in gone


def test_the_change_page_shows_the_state_and_where_the_entry_comes_from(big: BigStore, as_changer: Client) -> None:
    name = unique("shown/with?odd#chars")
    add(big, name, queue="reports", priority=3)
    page = as_changer.get(change_url(name)).content.decode()
    current = info(big, name)
    for expected in ("Next run", iso(current.state.next_run_ms), "Run count", "Shard:</label>",
                     "runtime (the API, the CLI or this page)", "Message (as Celery builds it for each run)",
                     "reports"):
        assert expected and expected in page, expected
    configured = as_changer.get(f"{PERIODIC}/cleanup/change/").content.decode()
    assert "This entry comes from beat_schedule" in configured


def test_the_overview_counts_periodic_entries_per_shard_with_their_leaders(big: BigStore,
                                                                         as_changer: Client) -> None:
    add(big, unique("counted"))
    page = as_changer.get(f"{ADMIN}/overview/").content.decode()
    table = page[page.index('id="zset-periodic"'):page.index('id="zset-summary"')]
    rows = re.findall(r"<tr><td class=\"right\">(\d+)</td><td class=\"right\">([\d,]+)</td>"
                      r"<td class=\"right\">([\d,]+)</td><td class=\"right\">([^<]*)</td><td>([^<]*)</td></tr>", table)
    counts = PeriodicStore(big.store).counts()
    assert [(int(s), int(e.replace(",", "")), int(d.replace(",", ""))) for s, e, d, _, _ in rows] == \
        [(c.shard, c.entries, c.scheduled) for c in counts]
    assert {leader for *_, leader in rows} == {"none"}  # no dispatcher runs on this store
    total = sum(c.entries for c in counts)
    assert f">{total:,} in the store" in page and 'href="/admin/zset_scheduler/periodicentry/"' in page


def test_the_migrations_cover_the_models(db: Any) -> None:
    call_command("makemigrations", "zset_scheduler", "--check", "--dry-run", verbosity=0)
