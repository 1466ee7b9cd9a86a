"""The overview: per shard pending, in flight, lag, leader, epoch and dispatch rate; the live
dispatchers; dead letters; periodic entries per shard with the leader that fires them; the shared
prefixes and their collection.
``ops.status.read_status``: a bounded number of round trips whatever the store holds."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from ....celery.cli.output import duration, number, relative
from ....celery.cli.status import shared_summary
from ....model.times import iso
from ....ops.status import read_status
from ..base import StoreAdmin
from ..conf import celery_app

REFRESH_CHOICES = (0, 2, 5, 10, 30)


class OverviewAdmin(StoreAdmin):
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nothing to change here: the view permission alone shows it

    def list_page(self, request: HttpRequest) -> HttpResponse:
        self.require_view(request)
        store = self.store()
        status = read_status(store)
        now = status.now_ms
        shards = []
        for s in status.shards:
            leader = s.leader.member if s.leader else ("(unannounced)" if s.locked else "none")
            shards.append([s.shard, number(s.pending), number(s.inflight), duration(s.lag_ms(now)),
                           relative(s.oldest_due_ms, now), leader, s.epoch or "-",
                           number(s.leader.rate) if s.leader else "-",
                           number(s.leader.dispatched) if s.leader else "-"])
        totals = ["total", number(status.pending), number(status.inflight), duration(status.lag_ms),
                  relative(status.oldest_due_ms, now), "", "", number(status.rate), ""]
        dispatchers = [{
            "id": d.id, "shards": ", ".join(map(str, d.shards)) or "none",
            "expires": relative(d.expires_ms, now) if d.expires_ms else "pinned with --shards",
        } for d in status.dispatchers]
        try:
            refresh = int(request.GET.get("refresh") or 0)
        except ValueError:
            refresh = 0
        refresh = refresh if refresh in REFRESH_CHOICES else 0
        beat = celery_app().conf.beat_schedule or {}
        shared = shared_summary(status, self.installation().settings.collect_interval)
        leaders = {row[0]: row[5] for row in shards}
        periodic = [[c.shard, number(c.entries), number(c.scheduled), relative(c.next_look_ms, now), leaders[c.shard]]
                    for c in status.periodic]
        looks = [c.next_look_ms for c in status.periodic if c.next_look_ms is not None]
        entries, scheduled = sum(c.entries for c in status.periodic), sum(c.scheduled for c in status.periodic)
        first = min(looks) if looks else None
        periodic_totals = ["total", number(entries), number(scheduled), relative(first, now), ""]
        return self.render(
            request, "zset_scheduler/admin/overview.html", "Overview",
            prefix=store.keys.prefix, redis_time=iso(now), shards=shards, totals=totals,
            dispatchers=dispatchers, dead_letters=number(status.dead_letters), periodic=periodic,
            periodic_totals=periodic_totals, periodic_columns=["Shard", "Entries", "Scheduled", "Next run", "Leader"],
            beat=len(beat), beat_names=sorted(beat)[:20], refresh=refresh, refresh_choices=REFRESH_CHOICES,
            columns=["Shard", "Pending", "In flight", "Lag", "Oldest due", "Leader", "Epoch", "Rate/s",
                     "Dispatched"],
            scheduled_url=self._sibling("scheduledtask"), letters_url=self._sibling("deadletter"),
            periodic_url=self._sibling("periodicentry"),
            shared=shared.removeprefix("shared prefixes: "),
        )

    def _sibling(self, model_name: str) -> str:
        return str(reverse(f"admin:{self.opts.app_label}_{model_name}_changelist", current_app=self.admin_site.name))
