"""The admin in a real browser: Playwright driving Debian's chromium against pytest-django's live
server (loopback only). Log in, open the scheduled tasks, filter by task name, cancel one, requeue
a dead letter, open the overview; add a periodic entry through its form, see it listed, run it
now; screenshots go to $ZSET_TEST_ARTIFACTS (default build/test-artifacts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.celery.periodic import runtime as periodic

from .conftest import ADMIN, BigStore, dead, fill

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("ZSET_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))

playwright = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"no {CHROMIUM}: install Debian's chromium (apt-get install chromium)")


@pytest.fixture
def admin_user(transactional_db: Any) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_superuser("admin", "admin@example.com", "a-long-test-password")


def test_an_operator_filters_cancels_requeues_and_reads_the_overview(
    big: BigStore, admin_user: Any, live_server: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sync API runs an event loop in this thread; the ORM calls of the live server are in its own.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    charges = fill(big.app, 5, task="shop.charge", countdown=60)  # due before every reminder
    letter = dead(big.app, "browser-dead-letter")
    store, letters = big.store, ensure_installation(big.app).dead_letters
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            log_in(page, f"{live_server.url}{ADMIN}/scheduledtask/")
            page.wait_for_selector("#result_list")
            page.screenshot(path=str(ARTIFACTS / "scheduled-tasks.png"))

            page.click("#changelist-filter a:text-is('shop.charge')")
            page.wait_for_url("**task=shop.charge**")
            listed = page.locator("input.action-select").evaluate_all("boxes => boxes.map(b => b.value)")
            assert set(charges) <= set(listed)
            assert page.locator("#result_list tbody td:nth-child(3)").all_inner_texts() == ["shop.charge"] * len(listed)
            page.screenshot(path=str(ARTIFACTS / "scheduled-tasks-by-name.png"))

            victim = charges[2]
            page.check(f"input.action-select[value='{victim}']")
            page.select_option("select[name=action]", "cancel")
            page.click("button[name=index]")
            page.wait_for_selector("text=Are you sure you want to cancel the selected scheduled task?")
            page.screenshot(path=str(ARTIFACTS / "cancel-confirmation.png"))
            page.click("input[type=submit][value^='Yes']")
            page.wait_for_selector("ul.messagelist li.success")
            assert "Cancelled 1 scheduled task." in page.inner_text("ul.messagelist")
            assert page.locator("#result_list tbody tr").count() == len(listed) - 1

            page.goto(f"{live_server.url}{ADMIN}/deadletter/")
            page.click(f"a:text-is('{letter.task_id}')")
            page.wait_for_selector("pre.zset-traceback")
            page.screenshot(path=str(ARTIFACTS / "dead-letter.png"), full_page=True)
            page.click("button:text-is('Requeue now')")
            page.click("input[type=submit][value^='Yes']")
            page.wait_for_selector("ul.messagelist li.success")
            assert "Requeued 1 dead letter, due now." in page.inner_text("ul.messagelist")

            page.goto(f"{live_server.url}{ADMIN}/overview/")
            page.wait_for_selector("#zset-shards")
            assert page.locator("#zset-shards tbody tr").count() == 5  # 4 shards and the total
            page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)
        finally:
            browser.close()
    assert store.get(victim) is None and all(store.get(i) for i in charges if i != victim)
    assert store.get(letter.task_id) is not None and letters.get(letter.task_id) is None


def log_in(page: Any, url: str) -> None:
    page.goto(url)
    assert "/admin/login/" in page.url
    page.fill("#id_username", "admin")
    page.fill("#id_password", "a-long-test-password")
    page.click("input[type=submit]")


def test_an_operator_adds_a_periodic_entry_sees_it_listed_and_runs_it_now(
    big: BigStore, admin_user: Any, live_server: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = "aaa-browser-heartbeat"  # sorts first: on the first page, however many entries the store holds
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            log_in(page, f"{live_server.url}{ADMIN}/periodicentry/")
            page.wait_for_selector("#changelist")
            page.click("ul.object-tools a.addlink")
            page.wait_for_selector("#periodicentry_form")
            # Only the chosen schedule type's fields show (the page's deferred script, which runs
            # once the page is parsed: wait for it, or a fast check races it): interval by default.
            page.wait_for_selector("#id_minute", state="hidden", timeout=15_000)
            assert page.is_visible("#id_every") and not page.is_visible("#id_minute")
            page.check("input[name=schedule_type][value=crontab]")
            assert page.is_visible("#id_minute") and not page.is_visible("#id_every")
            page.check("input[name=schedule_type][value=interval]")
            page.fill("#id_name", name)
            page.fill("#id_task", "shop.webhook")
            page.fill("#id_every", "30")
            page.fill("#id_kwargs", '{"url": "http://127.0.0.1:9/heartbeat"}')
            page.fill("#id_description", "added from the browser test")
            page.screenshot(path=str(ARTIFACTS / "periodic-entry-add.png"), full_page=True)
            page.click("input[name=_save]")
            page.wait_for_selector("ul.messagelist li.success")
            assert f"The periodic entry “{name}” was added successfully." in page.inner_text("ul.messagelist")
            row = page.locator("#result_list tbody tr", has_text=name)
            assert row.count() == 1
            cells = row.locator("td").all_inner_texts()
            assert cells[1:5] == ["shop.webhook", "every 30s", "enabled", cells[4]] and cells[4]  # next run
            page.screenshot(path=str(ARTIFACTS / "periodic-entries.png"), full_page=True)

            page.click(f"a:text-is('{name}')")
            page.wait_for_selector("#periodicentry_form")
            page.click("button:text-is('Run now')")
            page.wait_for_selector("text=Are you sure you want to run now the selected periodic entry?")
            page.click("input[type=submit][value^='Yes']")
            page.wait_for_selector("ul.messagelist li.success")
            assert "Run now (due now): 1 periodic entry." in page.inner_text("ul.messagelist")
            page.screenshot(path=str(ARTIFACTS / "periodic-entry.png"), full_page=True)
        finally:
            browser.close()
    added = periodic.get(big.app, name)
    assert added is not None and added.entry.schedule == {"type": "interval", "every": 30.0, "relative": False}
    assert added.entry.kwargs == {"url": "http://127.0.0.1:9/heartbeat"} and added.state.total_run_count == 1
    assert added.state.last_task_id is not None and big.store.get(added.state.last_task_id) is not None
    periodic.remove(big.app, name)
