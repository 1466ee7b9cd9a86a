"""Scheduled tasks: the pending store by due time, a page at a time (cursor paging, never a scan),
one task's detail, and cancel / run now / reschedule on one, on the checked rows or on every task
the filters select, each behind a confirmation page."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from ....celery.cli.output import number, relative
from ....celery.core.messages import decompress
from ....model.cursors import InvalidCursor
from ....model.times import iso
from ....ops import pending as ops
from ....ops.views import summary_view
from ....store.pending import Store
from ....store.snapshot import redis_now_ms
from .. import audit
from ..base import SELECTED, Choice, Column, FilterSpec, StoreAdmin, View, cells, query, short_time
from ..conf import celery_app, task_names
from ..forms import RescheduleForm, typed_time
from .details import entry_sections, plural, selected

ACTIONS = {
    "cancel": "Cancel selected scheduled tasks",
    "run_now": "Run selected scheduled tasks now",
    "reschedule": "Reschedule selected scheduled tasks…",
}
COLUMNS = [Column("Task"), Column("Arguments"), Column("Due (UTC)", "nowrap"), Column("", "nowrap"),
           Column("Shard", "right")]
LARGE = 200_000  # a selection this big is better done with manage.py zset (not in one web request)


@dataclass(frozen=True)
class Filters:
    """The listing's filters, as the query string (GET) or an action's form (POST) carries them."""

    task: str | None = None
    shard: int | None = None
    from_ms: int | None = None
    until_ms: int | None = None

    @classmethod
    def parse(cls, params: Mapping[str, Any], store: Store, errors: list[str]) -> Filters:
        shard: int | None = None
        raw = (params.get("shard") or "").strip()
        if raw:
            if raw.isdigit() and int(raw) < store.shards:
                shard = int(raw)
            else:
                errors.append(f"shard: {raw!r} is not one of the store's shards 0..{store.shards - 1}")
        return cls((params.get("task") or "").strip() or None, shard,
                   typed_time(params, "from", errors), typed_time(params, "until", errors))

    def params(self) -> dict[str, Any]:
        """Absolute times: a page resumed later still means the same range."""
        return {"task": self.task, "shard": self.shard, "from": iso(self.from_ms), "until": iso(self.until_ms)}

    def selection(self) -> ops.Selection:
        return ops.Selection(None if self.shard is None else [self.shard], self.from_ms, self.until_ms, self.task)

    def describe(self) -> str:
        parts = []
        if self.task:
            parts.append(f"task {self.task}")
        if self.shard is not None:
            parts.append(f"shard {self.shard}")
        if self.from_ms is not None:
            parts.append(f"due from {iso(self.from_ms)}")
        if self.until_ms is not None:
            parts.append(f"due until {iso(self.until_ms)}")
        return "; ".join(parts) or "no filter"

    def command(self, action: str) -> str:
        """The ``manage.py zset`` line doing the same (the CLI cancels by selection)."""
        words = ["manage.py zset", action]
        if self.task:
            words.append(f"--task {self.task}")
        if self.shard is not None:
            words.append(f"--shard {self.shard}")
        if self.from_ms is not None:
            words.append(f"--due-after {iso(self.from_ms)}")
        if self.until_ms is not None:
            words.append(f"--due-before {iso(self.until_ms)}")
        if len(words) == 2:
            words.append("--all")
        return " ".join([*words, "--yes"])


class ScheduledTaskAdmin(StoreAdmin):
    def routes(self) -> list[tuple[str, View, str]]:
        return [
            ("", self.list_page, "changelist"),
            ("action/", self.action_page, "action"),
            ("<path:object_id>/change/", self.detail_page, "change"),
        ]

    # -- the listing --------------------------------------------------------------------------

    def list_page(self, request: HttpRequest) -> HttpResponse:
        self.require_view(request)
        store = self.store()
        wanted = (request.GET.get("q") or "").strip()
        if wanted:
            if store.get(wanted) is not None:
                return HttpResponseRedirect(self.url("change", quote(wanted)))
            self.message_user(request, f"No pending or in-flight task with ID “{wanted}”.", messages.WARNING)
        errors: list[str] = []
        flt = Filters.parse(request.GET, store, errors)
        cursor = request.GET.get("cursor") or None
        listing = self._listing(store, flt, cursor, errors)
        total = ops.count_selected(store, flt.selection())
        now = redis_now_ms(store)
        change = self.has_change_permission(request)
        rows = []
        for item in listing.entries:
            row = summary_view(item.task_id, item.payload)
            rows.append({
                "id": item.task_id, "url": self.url("change", quote(item.task_id)),
                "cells": cells(COLUMNS, [row["task"] or f"? ({row['error']})", _arguments(row),
                                         short_time(item.due_ms), relative(item.due_ms, now), item.shard]),
            })
        params = flt.params()
        if flt.task:
            count = (f"{number(total)} scheduled tasks in this range; the task filter read "
                     f"{number(listing.scanned)} of them for this page")
        else:
            count = f"{number(total)} scheduled task{'' if total == 1 else 's'}"
        return self.render(
            request, self.list_template, "Scheduled tasks", subtitle=None,
            columns=COLUMNS,
            rows=rows, errors=errors, count=count, now=iso(now),
            filters=self._filters(store, flt, params), active=any(v is not None for v in params.values()),
            clear_url=query({}), first_url=query(params) if cursor else None,
            next_url=query(params, cursor=listing.cursor) if listing.cursor else None,
            search={"name": "q", "placeholder": "task id", "value": ""},
            times=[("from", "Due from", params["from"]), ("until", "until", params["until"])],
            hidden={k: v for k, v in params.items() if k in ("task", "shard") and v is not None},
            actions=ACTIONS if change else {}, selected_name=SELECTED, action_url=self.url("action"),
            across=params, total=total if not flt.task else None, empty="No scheduled tasks match.",
            object_tools=[], page_note="Ordered by due time; each page reads a bounded number of entries.",
        )

    def _listing(self, store: Store, flt: Filters, cursor: str | None, errors: list[str]) -> ops.Listing:
        options = self.options
        shards = None if flt.shard is None else [flt.shard]
        try:
            return ops.list_pending(store, shards=shards, min_due=flt.from_ms, max_due=flt.until_ms,
                                    task_name=flt.task, limit=options.page_size, cursor=cursor,
                                    scan_limit=options.scan_limit)
        except InvalidCursor as exc:
            errors.append(f"{exc}: showing the first page")
            return ops.list_pending(store, shards=shards, min_due=flt.from_ms, max_due=flt.until_ms,
                                    task_name=flt.task, limit=options.page_size, scan_limit=options.scan_limit)

    def _filters(self, store: Store, flt: Filters, params: dict[str, Any]) -> list[FilterSpec]:
        names = task_names(celery_app())
        if flt.task and flt.task not in names:
            names.append(flt.task)
        specs = [FilterSpec("task name", [Choice("All", query(params, task=None), flt.task is None)] + [
            Choice(n, query(params, task=n), flt.task == n) for n in names])]
        if store.shards <= 64:
            specs.append(FilterSpec("shard", [Choice("All", query(params, shard=None), flt.shard is None)] + [
                Choice(str(s), query(params, shard=s), flt.shard == s) for s in range(store.shards)]))
        return specs

    # -- one task -----------------------------------------------------------------------------

    def detail_page(self, request: HttpRequest, object_id: str) -> HttpResponse:
        self.require_view(request)
        task_id = unquote(object_id)
        store = self.store()
        view = ops.show(store, task_id, decompress)
        if view is None:
            self.message_user(request, f"Scheduled task with ID “{task_id}” does not exist. Perhaps it was "
                                       "dispatched or cancelled?", messages.WARNING)
            return HttpResponseRedirect(self.url("changelist"))
        now = redis_now_ms(store)
        if view["state"] == "pending":
            state = f"pending, due {view['due']} ({relative(view['due_ms'], now)})"
        else:
            state = f"in flight: being published (lease until {iso(view['lease_deadline_ms'])})"
        buttons = []
        if self.has_change_permission(request) and view["state"] == "pending":
            here = self.url("change", quote(task_id))
            buttons = [("cancel", "Cancel", "deletelink", self.url("changelist")),
                       ("run_now", "Run now", "", here), ("reschedule", "Reschedule…", "", here)]
        return self.render(
            request, "zset_scheduler/admin/detail.html", view["task"] or task_id, subtitle=task_id,
            object_id=task_id, sections=entry_sections(view, state), buttons=buttons,
            action_url=self.url("action"), selected_name=SELECTED, traceback=None,
        )

    # -- actions ------------------------------------------------------------------------------

    def action_page(self, request: HttpRequest) -> HttpResponse:
        action = self.posted_action(request, ACTIONS)
        if not isinstance(action, str):
            return action
        store = self.store()
        across = request.POST.get("select_across") == "1"
        ids = [] if across else self.selected_ids(request)
        if not across and not ids:
            return self.nothing_selected(request)
        errors: list[str] = []
        flt = Filters.parse(request.POST, store, errors) if across else Filters()
        if errors:
            return self.back(request, "; ".join(errors), messages.ERROR)
        confirmed = request.POST.get("post") == "yes"
        form = RescheduleForm(request.POST if confirmed else None) if action == "reschedule" else None
        if confirmed and (form is None or form.is_valid()):
            due = None if form is None else form.cleaned_data["due"]
            self._perform(request, store, action, ids, flt if across else None, due)
            return self.back(request)
        return self._confirm(request, store, action, ids, flt if across else None, form)

    def _confirm(self, request: HttpRequest, store: Store, action: str, ids: list[str], flt: Filters | None,
                 form: RescheduleForm | None) -> HttpResponse:
        verb = {"cancel": "cancel", "run_now": "run now", "reschedule": "reschedule"}[action]
        warning = None
        hidden = {"action": action}
        if flt is None:
            what = selected(len(ids), "scheduled task")
            links = {i: self.url("change", quote(i)) for i in ids}
        else:
            total = ops.count_selected(store, flt.selection())
            hidden.update({"select_across": "1", **{k: str(v) for k, v in flt.params().items() if v is not None}})
            scope = f"among {plural(total, 'scheduled task')}" if flt.task else plural(total, "scheduled task")
            what = f"every scheduled task matching ({flt.describe()}): {scope}"
            links = {}
            if total > LARGE:
                warning = (f"{number(total)} tasks are a lot for one web request, which may time out (what was "
                           "done stays done; run it again for the rest).")
                if action == "cancel":
                    warning += f" The same from a shell: {flt.command('cancel')}"
        effect = {"cancel": " They are removed from the store and will not run.",
                  "run_now": " They become due now and are dispatched at once.",
                  "reschedule": ""}[action]
        return self.confirm(
            request, title="Are you sure?", question=f"Are you sure you want to {verb} {what}?{effect}",
            action=action, ids=ids, links=links, hidden=hidden, form=form, warning=warning,
        )

    def _perform(self, request: HttpRequest, store: Store, action: str, ids: list[str], flt: Filters | None,
                 due: int | None) -> None:
        model = self.model
        if action == "cancel":
            if flt is None:
                outcome = ops.cancel(store, ids)
                done = [i for i, s in outcome.items() if s == "cancelled"]
                audit.log(request, model, audit.DELETION, [(i, i) for i in done], "Cancelled.")
                self._report(request, "Cancelled", done, outcome)
            else:
                counts = ops.cancel_selected(store, flt.selection())
                self._report_counts(request, "Cancelled", counts, "cancelled", flt, audit.DELETION)
            return
        if action == "run_now":
            if flt is None:
                when, moved = ops.run_now(store, ids)
                self._moved(request, "Run now", ids, moved, when)
            else:
                when, counts = ops.run_now_selected(store, flt.selection())
                self._report_counts(request, f"Made due now ({iso(when)})", counts, "rescheduled", flt, audit.CHANGE)
            return
        assert due is not None
        if flt is None:
            self._moved(request, "Rescheduled", ids, ops.reschedule(store, ids, due), due)
        else:
            counts = ops.reschedule_selected(store, flt.selection(), due)
            self._report_counts(request, f"Rescheduled to {iso(due)}", counts, "rescheduled", flt, audit.CHANGE)

    def _moved(self, request: HttpRequest, verb: str, ids: list[str], outcome: Mapping[str, str], when: int) -> None:
        done = [i for i in ids if outcome.get(i) == "rescheduled"]
        audit.log(request, self.model, audit.CHANGE, [(i, i) for i in done], f"{verb}: due {iso(when)}.")
        self._report(request, f"{verb} (due {iso(when)}):", done, outcome)

    def _report(self, request: HttpRequest, verb: str, done: list[str], outcome: Mapping[str, str]) -> None:
        if done:
            self.message_user(request, f"{verb} {plural(len(done), 'scheduled task')}.", messages.SUCCESS)
        inflight = sum(1 for s in outcome.values() if s == "inflight")
        missing = sum(1 for s in outcome.values() if s in ("unknown", "not_pending"))
        if inflight:
            self.message_user(request, f"{plural(inflight, 'task')} being dispatched right now could not be changed.",
                              messages.WARNING)
        if missing:
            self.message_user(request, f"{plural(missing, 'task')} no longer pending (already dispatched or "
                                       "cancelled).", messages.WARNING)

    def _report_counts(self, request: HttpRequest, verb: str, counts: Mapping[str, int], ok: str,
                       flt: Filters, flag: int) -> None:
        done = counts.get(ok, 0)
        summary = ", ".join(f"{number(n)} {s}" for s, n in sorted(counts.items())) or "nothing matched"
        text = f"{verb} {plural(done, 'scheduled task')} matching ({flt.describe()})"
        audit.log(request, self.model, flag, [(None, text)], f"{text}. Outcome: {summary}.")
        self.message_user(request, f"{text}.", messages.SUCCESS if done else messages.WARNING)
        others = {s: n for s, n in counts.items() if s != ok and n}
        if others:
            self.message_user(request, "Not changed: " + ", ".join(f"{number(n)} {s}" for s, n in others.items()),
                              messages.WARNING)


def _arguments(row: Mapping[str, Any], width: int = 120) -> str | None:
    """Celery's ``argsrepr``, and ``kwargsrepr`` when there are any."""
    if row["args"] is None and row["kwargs"] is None:
        return None
    text = " ".join(str(x) for x in (row["args"], row["kwargs"]) if x not in (None, "", "{}"))
    return text if len(text) <= width else text[: width - 1] + "…"
