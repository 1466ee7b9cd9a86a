"""Periodic entries: by name, a page at a time (the runtime API's cursor paging, never a full
load), with next run, last run and run count; add and edit with Celery's schedule types; enable,
disable, pause, resume, run now and delete on one entry or the checked rows, each behind a
confirmation page. Every change goes through ``celery_zset_scheduler.periodic``, so running
dispatchers act on it at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect

from ....celery.cli.output import number, relative
from ....celery.periodic import runtime as api
from ....errors import ConfigurationError
from ....model.cursors import InvalidCursor
from ....model.periodic import PeriodicEntryError
from ....model.times import iso
from ....ops.periodic import describe, status_of
from ....store.periodic import PeriodicStore
from ....store.snapshot import redis_now_ms
from .. import audit
from ..base import SELECTED, Column, StoreAdmin, View, cells, query, short_time
from ..conf import celery_app, task_names
from ..periodic_form import EDITED, PauseForm, PeriodicEntryForm, changed_fields, initial_of, time_zones
from .details import periodic_sections, plural, selected

ACTIONS = {
    "run_now": "Run selected periodic entries now",
    "enable": "Enable selected periodic entries",
    "disable": "Disable selected periodic entries",
    "pause": "Pause selected periodic entries…",
    "resume": "Resume selected periodic entries",
    "delete": "Delete selected periodic entries",
}
#: What each action tells, and the status of the runtime API that means it was done.
EFFECTS = {
    "run_now": ("run now", "Each runs once, due now; its schedule does not move.", "triggered", "Run now"),
    "enable": ("enable", "Each runs next at its first fire time after now; nothing missed while disabled is "
                         "caught up.", "enabled", "Enabled"),
    "disable": ("disable", "Nothing runs while disabled, and what falls due meanwhile is never caught up.",
                "disabled", "Disabled"),
    "pause": ("pause", "Nothing runs while paused; resuming catches up what fell due by each entry's catch-up "
                       "policy.", "paused", "Paused"),
    "resume": ("resume", "What fell due while paused follows each entry's catch-up policy.", "resumed", "Resumed"),
    "delete": ("delete", "Runs already stored still run. An entry of beat_schedule comes back at the next "
                         "dispatcher start while the configuration has it.", "removed", "Deleted"),
}
UNCHANGED = {"enable": "already enabled", "disable": "already disabled", "pause": "already paused",
             "resume": "not paused"}
COLUMNS = [Column("Task"), Column("Schedule"), Column("Status"), Column("Next run (UTC)", "nowrap"),
           Column("", "nowrap"), Column("Last run (UTC)", "nowrap"), Column("Runs", "right"), Column("Shard", "right"),
           Column("Source")]


def entries(n: int) -> str:
    return plural(n, "periodic entry", "periodic entries")


class PeriodicEntryAdmin(StoreAdmin):
    def routes(self) -> list[tuple[str, View, str]]:
        return [
            ("", self.list_page, "changelist"),
            ("add/", self.add_page, "add"),
            ("action/", self.action_page, "action"),
            ("<path:object_id>/change/", self.change_page, "change"),
        ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(self.has_change_permission(request))  # adding changes the store (and shows the index's link)

    def app(self) -> Any:
        return celery_app()

    # -- the listing --------------------------------------------------------------------------

    def list_page(self, request: HttpRequest) -> HttpResponse:
        self.require_view(request)
        store = self.store()
        app = self.app()
        wanted = (request.GET.get("q") or "").strip()
        if wanted:
            if api.get(app, wanted) is not None:
                return HttpResponseRedirect(self.url("change", quote(wanted)))
            self.message_user(request, f"No periodic entry named “{wanted}”.", messages.WARNING)
        errors: list[str] = []
        cursor = request.GET.get("cursor") or None
        page = self._page(app, cursor, errors)
        counts = PeriodicStore(store).counts()
        now = redis_now_ms(store)
        rows = []
        for info in page.entries:
            entry, state = info.entry, info.state
            status = status_of(entry, state)
            rows.append({
                "id": entry.name, "url": self.url("change", quote(entry.name)),
                "cells": cells(COLUMNS, [
                    entry.task, describe(entry.schedule), (status, entry.pause_note or None),
                    short_time(state.next_run_ms) if state.next_run_ms is not None else None,
                    relative(state.next_run_ms, now) if state.next_run_ms is not None else None,
                    short_time(state.last_run_ms) if state.last_run_ms is not None else None,
                    number(state.total_run_count), info.shard, "beat_schedule" if info.from_config else "runtime",
                ]),
            })
        total = sum(c.entries for c in counts)
        scheduled = sum(c.scheduled for c in counts)
        change = self.has_change_permission(request)
        return self.render(
            request, self.list_template, "Periodic entries",
            columns=COLUMNS, rows=rows, errors=errors,
            count=f"{entries(total)}, {number(scheduled)} scheduled",
            now=iso(now), filters=[], active=False, clear_url=query({}),
            first_url=query({}) if cursor else None,
            next_url=query({}, cursor=page.cursor) if page.cursor else None,
            search={"name": "q", "placeholder": "periodic entry by name", "value": ""}, times=[], hidden={},
            actions=ACTIONS if change else {}, selected_name=SELECTED, action_url=self.url("action"),
            across=None, total=None, empty="No periodic entries.", object_tools=[],
            add_url=self.url("add") if change else None,
            page_note="By name; each page reads a bounded number of entries.",
        )

    def _page(self, app: Any, cursor: str | None, errors: list[str]) -> api.PeriodicPage:
        limit = self.options.page_size
        try:
            return api.list_entries(app, limit=limit, cursor=cursor)
        except InvalidCursor as exc:
            errors.append(f"{exc}: showing the first page")
            return api.list_entries(app, limit=limit)

    # -- add and edit -------------------------------------------------------------------------

    def add_page(self, request: HttpRequest) -> HttpResponse:
        self.require_change(request)
        store = self.store()
        app = self.app()
        if request.method == "POST":
            form = PeriodicEntryForm(request.POST, app=app, now_ms=redis_now_ms(store))
            if form.is_valid() and form.entry is not None:
                entry = form.entry
                status = self._write(form, lambda: api.add_many(app, [entry])[entry.name])
                if status == "exists":
                    form.add_error("name", "A periodic entry with this name already exists.")
                elif status is not None:
                    audit.log(request, self.model, audit.ADDITION, [(entry.name, entry.name)],
                              f"Added: {entry.task}, {describe(entry.schedule)}.")
                    self.message_user(request, f"The periodic entry “{entry.name}” was added successfully.",
                                      messages.SUCCESS)
                    return self._saved(request, entry.name, adding=True)
        elif request.method in ("GET", "HEAD"):
            form = PeriodicEntryForm(app=app)
        else:
            return HttpResponseNotAllowed(["GET", "POST"])
        return self._form_page(request, app, form, f"Add {self.opts.verbose_name}", None, [], [])

    def change_page(self, request: HttpRequest, object_id: str) -> HttpResponse:
        self.require_view(request)
        name = unquote(object_id)
        store = self.store()
        app = self.app()
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        info = api.get(app, name)
        if info is None:
            self.message_user(request, f"Periodic entry “{name}” does not exist. Perhaps it was deleted?",
                              messages.WARNING)
            return HttpResponseRedirect(self.url("changelist"))
        change = self.has_change_permission(request)
        form = None
        if request.method == "POST":
            self.require_change(request)
            form = PeriodicEntryForm(request.POST, app=app, now_ms=redis_now_ms(store), current=info.entry)
            saved = self._edit(request, app, info, form)
            if saved is not None:
                return saved
        elif change:
            form = PeriodicEntryForm(initial=initial_of(info.entry, info.state.revision), app=app,
                                     current=info.entry)
        now = redis_now_ms(store)
        buttons = self._buttons(request, info)
        warning = None
        if info.from_config and change:
            warning = ("This entry comes from beat_schedule: the next dispatcher start gives it the configuration's "
                       "definition again (keeping enabled and paused). Change beat_schedule to change it for good.")
        title = f"{'Change' if change else 'View'} {self.opts.verbose_name}"  # as Django's change form
        return self._form_page(request, app, form, title, name, periodic_sections(info, now, definition=form is None),
                               buttons, warning=warning)

    def _edit(self, request: HttpRequest, app: Any, info: api.PeriodicInfo,
              form: PeriodicEntryForm) -> HttpResponse | None:
        """Save a valid edit (None: the form has errors to show)."""
        if not form.is_valid() or form.entry is None:
            return None
        name, new = info.entry.name, form.entry
        if form.cleaned_data["revision"] != info.state.revision:
            # The state's revision moves with every definition change and switch, never with a run.
            form.add_error(None, "This entry was changed by someone else after this page was opened: nothing was "
                                 "saved. Reload the page to see the change, then edit again.")
            return None
        changed = changed_fields(info.entry, new)
        status = self._write(form, lambda: api.update(app, name, **{f: getattr(new, f) for f in EDITED}))
        if status is None:
            return None
        if status == "unknown":
            self.message_user(request, f"Periodic entry “{name}” was deleted meanwhile: nothing was saved.",
                              messages.WARNING)
            return HttpResponseRedirect(self.url("changelist"))
        if changed:
            what = f"Changed {', '.join(changed)}."
            audit.log(request, self.model, audit.CHANGE, [(name, name)], what)
            self.message_user(request, f"The periodic entry “{name}” was changed successfully. {what}",
                              messages.SUCCESS)
        else:
            self.message_user(request, f"No fields changed. The periodic entry “{name}” is as it was.",
                              messages.SUCCESS)
        return self._saved(request, name, adding=False)

    def _write(self, form: PeriodicEntryForm, write: Any) -> str | None:
        """Run the API's write; an error of its own checks (or of Celery building the message) goes
        to the form, on the field it names."""
        try:
            return str(write())
        except PeriodicEntryError as exc:
            form.refused(exc)
        except ConfigurationError as exc:
            form.add_error(None, str(exc))
        return None

    def _saved(self, request: HttpRequest, name: str, *, adding: bool) -> HttpResponseRedirect:
        if "_continue" in request.POST:
            return HttpResponseRedirect(self.url("change", quote(name)))
        if adding and "_addanother" in request.POST:
            return HttpResponseRedirect(self.url("add"))
        return HttpResponseRedirect(self.url("changelist"))

    def _buttons(self, request: HttpRequest, info: Any) -> list[tuple[str, str, str, str]]:
        if not self.has_change_permission(request):
            return []
        here = self.url("change", quote(info.entry.name))
        entry = info.entry
        return [
            ("run_now", "Run now", "", here),
            ("disable", "Disable", "", here) if entry.enabled else ("enable", "Enable", "", here),
            ("resume", "Resume", "", here) if entry.paused else ("pause", "Pause…", "", here),
            ("delete", "Delete", "deletelink", self.url("changelist")),
        ]

    def _form_page(self, request: HttpRequest, app: Any, form: PeriodicEntryForm | None, title: str,
                   object_id: str | None, sections: list[Any], buttons: list[Any],
                   warning: str | None = None) -> HttpResponse:
        return self.render(
            request, "zset_scheduler/admin/periodic_form.html", title, subtitle=object_id, object_id=object_id,
            sections=sections, buttons=buttons, action_url=self.url("action"), selected_name=SELECTED,
            traceback=None, form=form, fieldsets=form.fieldsets() if form is not None else [],
            task_names=task_names(app) if form is not None else [],
            time_zones=time_zones() if form is not None else [], adding=object_id is None, warning=warning,
        )

    # -- actions ------------------------------------------------------------------------------

    def action_page(self, request: HttpRequest) -> HttpResponse:
        action = self.posted_action(request, ACTIONS)
        if not isinstance(action, str):
            return action
        if request.POST.get("select_across") == "1":
            return self.back(request, "Periodic entries are changed by name: check them on the page.",
                             messages.ERROR)
        self.store()
        names = self.selected_ids(request)
        if not names:
            return self.nothing_selected(request)
        confirmed = request.POST.get("post") == "yes"
        form = PauseForm(request.POST if confirmed else None) if action == "pause" else None
        if confirmed and (form is None or form.is_valid()):
            note = "" if form is None else form.cleaned_data["note"]
            self._perform(request, action, names, note)
            return self.back(request)
        verb, effect, _, _ = EFFECTS[action]
        what = selected(len(names), "periodic entry", "periodic entries")
        return self.confirm(
            request, title="Are you sure?", question=f"Are you sure you want to {verb} {what}? {effect}",
            action=action, ids=names, links={n: self.url("change", quote(n)) for n in names},
            hidden={"action": action}, form=form,
        )

    def _perform(self, request: HttpRequest, action: str, names: list[str], note: str) -> None:
        app = self.app()
        _, _, ok, verb = EFFECTS[action]
        if action == "run_now":
            ids = api.run_now(app, *names)
            outcome = {n: ok if t else "unknown" for n, t in ids.items()}
            audit.log_each(request, self.model, audit.CHANGE,
                           [(n, n, f"Run now: task {t}.") for n, t in ids.items() if t])
        else:
            run = {"enable": api.enable, "disable": api.disable, "resume": api.resume, "delete": api.remove,
                   "pause": lambda a, *n: api.pause(a, *n, note=note)}[action]
            outcome = run(app, *names)
            message = f"{verb}: {note}" if action == "pause" and note else f"{verb}."
            flag = audit.DELETION if action == "delete" else audit.CHANGE
            audit.log(request, self.model, flag, [(n, n) for n, s in outcome.items() if s == ok], message)
        self._report(request, action, verb, outcome, ok)

    def _report(self, request: HttpRequest, action: str, verb: str, outcome: Mapping[str, str], ok: str) -> None:
        done = sum(1 for s in outcome.values() if s == ok)
        unchanged = sum(1 for s in outcome.values() if s == "unchanged")
        unknown = sum(1 for s in outcome.values() if s == "unknown")
        if done:
            text = f"Run now (due now): {entries(done)}." if action == "run_now" else f"{verb} {entries(done)}."
            self.message_user(request, text, messages.SUCCESS)
        if unchanged:
            self.message_user(request, f"{entries(unchanged)} left as {'it was' if unchanged == 1 else 'they were'} "
                                       f"({UNCHANGED.get(action, 'unchanged')}).", messages.WARNING)
        if unknown:
            self.message_user(request, f"{entries(unknown)} not found (deleted meanwhile?).", messages.WARNING)
