"""A page costs a bounded number of Redis commands, whatever the store holds: counted with
``INFO commandstats`` (commands run inside Lua scripts included) on a private server, for every
page, with 1,000 and with 100,000 scheduled tasks and dead letters, and with 100 and with 10,000
periodic entries."""

from __future__ import annotations

from typing import Any

from django.test import Client

from celery_zset_scheduler.celery.core.state import ensure_installation
from celery_zset_scheduler.celery.periodic import runtime as periodic
from celery_zset_scheduler.model.letters import DeadLetter
from celery_zset_scheduler.model.periodic import PeriodicEntry
from celery_zset_scheduler.store.deadletters import add_call
from celery_zset_scheduler.store.periodic import PeriodicStore
from celery_zset_scheduler.testing import RedisServer

from .conftest import ADMIN, SHARDS, Users, dead, fill, make_app

SMALL, LARGE = 1_000, 100_000
PERIODIC_SMALL, PERIODIC_LARGE = 100, 10_000


def commands(server: RedisServer) -> int:
    """Commands the server has run so far, not counting the INFO calls that ask."""
    stats = server.client().info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def add_letters(app: Any, n: int, start: int) -> None:
    letters = ensure_installation(app).dead_letters
    template = dead(app, "template")
    calls = [add_call(letters.keys, DeadLetter(**{**template.__dict__, "task_id": f"dl-{i}"}),
                      letters.max_len, letters.max_age_ms) for i in range(start, start + n)]
    for s in range(0, len(calls), 1000):
        letters.scripts.run_many(calls[s:s + 1000])


def cost(server: RedisServer, client: Client, url: str) -> int:
    before = commands(server)
    response = client.get(url)
    assert response.status_code in (200, 302), url
    return commands(server) - before


def test_every_page_costs_the_same_bounded_number_of_commands_at_1k_and_100k(users: Users, settings: Any) -> None:
    with RedisServer() as server:
        app = make_app(server, "zcost", prefix="zc")
        settings.CELERY_ZSET_ADMIN_APP = app
        first = fill(app, SMALL)
        add_letters(app, SMALL, 0)
        pages = {
            "overview": f"{ADMIN}/overview/",
            "scheduled": f"{ADMIN}/scheduledtask/",
            "scheduled, from a time": f"{ADMIN}/scheduledtask/?from=%2B1d",
            "scheduled, one shard": f"{ADMIN}/scheduledtask/?shard=2",
            "scheduled, by task name": f"{ADMIN}/scheduledtask/?task=shop.nothing",
            "scheduled, look up": f"{ADMIN}/scheduledtask/?q={first[0]}",
            "scheduled task": f"{ADMIN}/scheduledtask/{first[0]}/change/",
            "dead letters": f"{ADMIN}/deadletter/",
            "dead letters, by reason": f"{ADMIN}/deadletter/?reason=poison",
            "dead letter": f"{ADMIN}/deadletter/dl-5/change/",
        }
        client = Client()
        client.force_login(users.changer)
        for url in pages.values():  # loads the scripts once; then every page is measured as it is
            client.get(url)
        small = {name: cost(server, client, url) for name, url in pages.items()}
        fill(app, LARGE - SMALL, start=SMALL)
        add_letters(app, LARGE - SMALL, SMALL)
        store = ensure_installation(app).store
        assert sum(store.client.zcard(store.keys.shard(s).due) for s in range(SHARDS)) >= LARGE
        assert ensure_installation(app).dead_letters.count() >= LARGE
        large = {name: cost(server, client, url) for name, url in pages.items()}
    print("\nRedis commands per page (1k / 100k):", {k: (small[k], large[k]) for k in pages})
    # A filter by task name or reason reads up to 2,000 entries (the scan limit) per page: with 1k
    # it reads them all in one page script per shard, with 100k its bound is a few more.
    scans = {"scheduled, by task name", "dead letters, by reason"}
    assert {k: v for k, v in large.items() if k not in scans} == {k: v for k, v in small.items() if k not in scans}
    bound = {name: 16 + 6 * SHARDS for name in pages}
    bound["overview"] += 4 * SHARDS  # the shared prefixes and their collection: 3 HLEN and an HMGET a shard
    for name in scans:
        bound[name] = 16 + SHARDS * (2_000 // 500 + 2) * 3
    for name in pages:
        assert small[name] <= bound[name] and large[name] <= bound[name], (name, small[name], large[name])


def add_entries(app: Any, start: int, stop: int) -> None:
    entries = [PeriodicEntry(name=f"entry-{i:05}", task="shop.remind", schedule={"type": "interval", "every": 60.0},
                             kwargs={"user": f"user{i}@example.com", "text": "hello"}) for i in range(start, stop)]
    assert set(periodic.add_many(app, entries).values()) == {"added"}


def test_the_periodic_pages_cost_the_same_bounded_number_of_commands_at_100_and_10k(
    users: Users, settings: Any,
) -> None:
    with RedisServer() as server:
        app = make_app(server, "zpcost", prefix="zp")
        settings.CELERY_ZSET_ADMIN_APP = app
        add_entries(app, 0, PERIODIC_SMALL)
        pages = {
            "periodic entries": f"{ADMIN}/periodicentry/",
            "periodic entry": f"{ADMIN}/periodicentry/entry-00042/change/",
            "look up": f"{ADMIN}/periodicentry/?q=entry-00007",
            "add form": f"{ADMIN}/periodicentry/add/",
            "overview": f"{ADMIN}/overview/",
        }
        client = Client()
        client.force_login(users.changer)
        for url in pages.values():  # loads the scripts once
            client.get(url)
        small = {name: cost(server, client, url) for name, url in pages.items()}
        add_entries(app, PERIODIC_SMALL, PERIODIC_LARGE)
        store = ensure_installation(app).store
        assert sum(c.entries for c in PeriodicStore(store).counts()) == PERIODIC_LARGE
        large = {name: cost(server, client, url) for name, url in pages.items()}
        listing = client.get(pages["periodic entries"]).content.decode()
        assert listing.count('name="_selected_action"') == 100 and "10,000 periodic entries" in listing
    print("\nRedis commands per periodic page (100 / 10k):", {k: (small[k], large[k]) for k in pages})
    assert large == small
    # A page of 100 entries (the runtime API's paged listing): one ZRANGEBYLEX and three HMGETs per
    # shard, the per-shard counts, one HMGET for where the 100 come from: never the whole store.
    for name in pages:
        extra = 4 * SHARDS if name == "overview" else 0  # the shared prefixes, as above
        assert small[name] <= 16 + 6 * SHARDS + extra, (name, small[name])
