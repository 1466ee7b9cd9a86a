"""Dead letters: newest first with filters (task name, reason, time), a detail page with the
traceback and the original message, and requeue (now or at a time), delete, purge by filter."""

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
from ....ops import deadletters as ops
from ....ops.deadletters import LetterFilter
from ....store.deadletters import DeadLetters
from ....store.snapshot import redis_now_ms
from .. import audit
from ..base import SELECTED, Choice, Column, FilterSpec, StoreAdmin, View, cells, query, short_time
from ..conf import celery_app, task_names
from ..forms import RequeueForm, typed_time
from .details import letter_sections, plural, selected

ACTIONS = {
    "requeue": "Requeue selected dead letters now",
    "requeue_at": "Requeue selected dead letters at a time…",
    "delete": "Delete selected dead letters",
}
COLUMNS = [Column("Task"), Column("Reason"), Column("Exception"), Column("Attempts", "right"),
           Column("Dead-lettered (UTC)", "nowrap"), Column("", "nowrap")]
REASONS = ("retries_exhausted", "failed", "rejected", "unknown_task", "poison", "unpublishable")


@dataclass(frozen=True)
class Filters:
    task: str | None = None
    reason: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @classmethod
    def parse(cls, params: Mapping[str, Any], errors: list[str]) -> Filters:
        return cls((params.get("task") or "").strip() or None, (params.get("reason") or "").strip() or None,
                   typed_time(params, "since", errors), typed_time(params, "until", errors))

    def params(self) -> dict[str, Any]:
        return {"task": self.task, "reason": self.reason, "since": iso(self.since_ms), "until": iso(self.until_ms)}

    def letter_filter(self) -> LetterFilter:
        return LetterFilter(self.task, newest_ms=self.until_ms, oldest_ms=self.since_ms, reason=self.reason)

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in self.params().items() if v is not None]
        return "; ".join(parts) or "no filter"


class DeadLetterAdmin(StoreAdmin):
    def routes(self) -> list[tuple[str, View, str]]:
        return [
            ("", self.list_page, "changelist"),
            ("action/", self.action_page, "action"),
            ("<path:object_id>/change/", self.detail_page, "change"),
        ]

    def list_page(self, request: HttpRequest) -> HttpResponse:
        self.require_view(request)
        store = self.store()
        letters = self.dead_letters()
        wanted = (request.GET.get("q") or "").strip()
        if wanted:
            if letters.present([wanted]):
                return HttpResponseRedirect(self.url("change", quote(wanted)))
            self.message_user(request, f"No dead letter with ID “{wanted}”.", messages.WARNING)
        errors: list[str] = []
        flt = Filters.parse(request.GET, errors)
        cursor = request.GET.get("cursor") or None
        page = self._page(letters, flt, cursor, errors)
        total = ops.count_matching(letters, flt.letter_filter())
        now = redis_now_ms(store)
        rows = [{
            "id": x.task_id, "url": self.url("change", quote(x.task_id)),
            "cells": cells(COLUMNS, [x.task_name or "?", x.reason, _exception(x.exc_type, x.exc_message),
                                     x.attempts, short_time(x.dead_lettered_ms), relative(x.dead_lettered_ms, now)]),
        } for x in page.letters]
        params = flt.params()
        if total is None:
            count = (f"{number(letters.count())} dead letters; the filter read {number(page.scanned)} of them "
                     "for this page")
        else:
            count = f"{number(total)} dead letter{'' if total == 1 else 's'}"
        change = self.has_change_permission(request)
        tools = []
        if change and page.letters:
            tools = [("requeue", "Requeue all matching…"), ("delete", "Purge all matching…")]
        return self.render(
            request, self.list_template, "Dead letters",
            columns=COLUMNS,
            rows=rows, errors=errors, count=count, now=iso(now),
            filters=self._filters(flt, params), active=any(v is not None for v in params.values()),
            clear_url=query({}), first_url=query(params) if cursor else None,
            next_url=query(params, cursor=page.cursor) if page.cursor else None,
            search={"name": "q", "placeholder": "task id", "value": ""},
            times=[("since", "Dead-lettered since", params["since"]), ("until", "until", params["until"])],
            hidden={k: v for k, v in params.items() if k in ("task", "reason") and v is not None},
            actions=ACTIONS if change else {}, selected_name=SELECTED, action_url=self.url("action"),
            across=params, total=total, empty="No dead letters match.", object_tools=tools,
            page_note="Newest first; each page reads a bounded number of entries.",
        )

    def _page(self, letters: DeadLetters, flt: Filters, cursor: str | None, errors: list[str]) -> ops.LetterPage:
        options = self.options
        try:
            return ops.list_letters(letters, flt.letter_filter(), limit=options.page_size, cursor=cursor,
                                    scan_limit=options.scan_limit)
        except InvalidCursor as exc:
            errors.append(f"{exc}: showing the first page")
            return ops.list_letters(letters, flt.letter_filter(), limit=options.page_size,
                                    scan_limit=options.scan_limit)

    def _filters(self, flt: Filters, params: dict[str, Any]) -> list[FilterSpec]:
        names = task_names(celery_app())
        if flt.task and flt.task not in names:
            names.append(flt.task)
        return [
            FilterSpec("task name", [Choice("All", query(params, task=None), flt.task is None)] + [
                Choice(n, query(params, task=n), flt.task == n) for n in names]),
            FilterSpec("reason", [Choice("All", query(params, reason=None), flt.reason is None)] + [
                Choice(r.replace("_", " "), query(params, reason=r), flt.reason == r) for r in REASONS]),
        ]

    def detail_page(self, request: HttpRequest, object_id: str) -> HttpResponse:
        self.require_view(request)
        task_id = unquote(object_id)
        self.store()
        view = ops.show(self.dead_letters(), task_id, decompress)
        if view is None:
            self.message_user(request, f"Dead letter with ID “{task_id}” does not exist. Perhaps it was "
                                       "requeued or deleted?", messages.WARNING)
            return HttpResponseRedirect(self.url("changelist"))
        buttons = []
        if self.has_change_permission(request):
            here = self.url("changelist")
            buttons = [("requeue", "Requeue now", "", here), ("requeue_at", "Requeue at…", "", here),
                       ("delete", "Delete", "deletelink", here)]
        return self.render(
            request, "zset_scheduler/admin/detail.html", view["task"] or task_id, subtitle=task_id,
            object_id=task_id, sections=letter_sections(view), buttons=buttons, traceback=view["traceback"],
            action_url=self.url("action"), selected_name=SELECTED,
        )

    def action_page(self, request: HttpRequest) -> HttpResponse:
        action = self.posted_action(request, ACTIONS)
        if not isinstance(action, str):
            return action
        store = self.store()
        letters = self.dead_letters()
        across = request.POST.get("select_across") == "1"
        ids = [] if across else self.selected_ids(request)
        if not across and not ids:
            return self.nothing_selected(request)
        errors: list[str] = []
        flt = Filters.parse(request.POST, errors) if across else None
        if errors:
            return self.back(request, "; ".join(errors), messages.ERROR)
        confirmed = request.POST.get("post") == "yes"
        form = RequeueForm(request.POST if confirmed else None) if action == "requeue_at" else None
        if confirmed and (form is None or form.is_valid()):
            due = None if form is None else form.cleaned_data["due"]
            if action == "delete":
                self._delete(request, letters, ids, flt)
            else:
                self._requeue(request, store, letters, ids, flt, due)
            return self.back(request)
        hidden = {"action": action}
        if flt is None:
            what = selected(len(ids), "dead letter")
            links = {i: self.url("change", quote(i)) for i in ids}
        else:
            total = ops.count_matching(letters, flt.letter_filter())
            hidden.update({"select_across": "1", **{k: str(v) for k, v in flt.params().items() if v is not None}})
            scope = (f"among {plural(letters.count(), 'dead letter')}" if total is None
                     else plural(total, "dead letter"))
            what = f"every dead letter matching ({flt.describe()}): {scope}"
            links = {}
        question = {
            "requeue": f"Are you sure you want to requeue {what}, due now? Their attempts start again from zero.",
            "requeue_at": f"Are you sure you want to requeue {what}? Their attempts start again from zero.",
            "delete": f"Are you sure you want to delete {what} for good?",
        }[action]
        return self.confirm(request, title="Are you sure?", question=question, action=action, ids=ids,
                            links=links, hidden=hidden, form=form)

    def _requeue(self, request: HttpRequest, store: Any, letters: DeadLetters, ids: list[str],
                 flt: Filters | None, due: int | None) -> None:
        when = "now" if due is None else iso(due)
        if flt is None:
            outcome = ops.requeue(store, letters, ids, due_ms=due)
            done = [i for i, s in outcome.items() if s == "requeued"]
            audit.log(request, self.model, audit.CHANGE, [(i, i) for i in done], f"Requeued, due {when}.")
            if done:
                self.message_user(request, f"Requeued {plural(len(done), 'dead letter')}, due {when}.",
                                  messages.SUCCESS)
            counts: dict[str, int] = {}
            for status in outcome.values():
                counts[status] = counts.get(status, 0) + 1
        else:
            counts = {str(k): n for k, n in ops.requeue_matching(store, letters, flt.letter_filter(),
                                                                  due_ms=due).items()}
            done_n = counts.get("requeued", 0)
            text = f"Requeued {plural(done_n, 'dead letter')} matching ({flt.describe()}), due {when}"
            audit.log(request, self.model, audit.CHANGE, [(None, text)], f"{text}. Outcome: {counts}.")
            self.message_user(request, f"{text}.", messages.SUCCESS if done_n else messages.WARNING)
        notes = {"pending": "already pending again (left as they are)", "undecodable": "not decodable",
                 "unknown": "not found"}
        others = [f"{number(n)} {notes[s]}" for s, n in counts.items() if s in notes and n]
        if others:
            self.message_user(request, "Not requeued: " + ", ".join(others) + ".", messages.WARNING)

    def _delete(self, request: HttpRequest, letters: DeadLetters, ids: list[str], flt: Filters | None) -> None:
        if flt is None:
            outcome = ops.purge(letters, ids)
            done = [i for i, s in outcome.items() if s == "purged"]
            audit.log(request, self.model, audit.DELETION, [(i, i) for i in done], "Deleted.")
            if done:
                self.message_user(request, f"Deleted {plural(len(done), 'dead letter')}.", messages.SUCCESS)
            if len(done) < len(outcome):
                self.message_user(request, f"{plural(len(outcome) - len(done), 'dead letter')} not found.",
                                  messages.WARNING)
            return
        removed = ops.purge_matching(letters, flt.letter_filter())
        text = f"Purged {plural(removed, 'dead letter')} matching ({flt.describe()})"
        audit.log(request, self.model, audit.DELETION, [(None, text)], f"{text}.")
        self.message_user(request, f"{text}.", messages.SUCCESS if removed else messages.WARNING)


def _exception(exc_type: str, message: str, width: int = 80) -> str:
    text = " ".join((f"{exc_type}: {message}" if exc_type else message).split())
    return text if len(text) <= width else text[: width - 1] + "…"
