"""The add / edit form of a periodic entry: Celery's four schedule types and every field of
:class:`~celery_zset_scheduler.model.periodic.PeriodicEntry` but the pause switch.

Everything is checked before anything is written, by the same rules the runtime API applies
(``normalized``: the model's checks and Celery's parse of the crontab fields); an error names its
form field, so a bad crontab field, an unknown time zone or bad JSON is shown next to that field,
never as a server error. One rule is the form's own: a clocked time in the past is refused (the
API would store an entry that never runs), unless it is the entry's own, unchanged.
"""

from __future__ import annotations

import json
import zoneinfo
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from django import forms

from ...celery.periodic.entries import normalized
from ...errors import ConfigurationError
from ...model.periodic import (
    CATCHUP_POLICIES,
    MAX_NAME_LENGTH,
    OVERLAP_POLICIES,
    SOLAR_EVENTS,
    PeriodicEntry,
    PeriodicEntryError,
    iso_to_ms,
    ms_to_iso,
)
from ...model.times import iso
from .forms import TIME_HELP, MomentField

SCHEDULE_TYPES = [("interval", "Interval"), ("crontab", "Crontab"), ("solar", "Solar"), ("clocked", "Clocked (once)")]
CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")  # cron's order
#: Entry fields the form does not edit: the pause switch is the pause / resume actions'.
NOT_EDITED = ("name", "paused", "pause_note")
EDITED = tuple(f.name for f in fields(PeriodicEntry) if f.name not in NOT_EDITED)


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


class JSONTextField(forms.CharField):
    """A JSON list or object typed as text; ``clean`` returns it decoded (empty: ``[]`` / ``{}``)."""

    def __init__(self, kind: type[list[Any]] | type[dict[str, Any]], **kwargs: Any) -> None:
        self.kind = kind
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 2, "cols": 60, "class": "vLargeTextField"}))
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Any:
        text = (super().clean(value) or "").strip()
        if not text:
            return self.kind()
        try:
            decoded = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from None
        if not isinstance(decoded, self.kind):
            what = "list, e.g. [1, \"a\"]" if self.kind is list else "object, e.g. {\"key\": 1}"
            raise forms.ValidationError(f"must be a JSON {what}, not {type(decoded).__name__}")
        return decoded


def _text(**attrs: Any) -> forms.TextInput:
    return forms.TextInput(attrs=attrs)


@lru_cache(maxsize=1)
def time_zones() -> list[str]:
    return sorted(zoneinfo.available_timezones())


@dataclass(frozen=True)
class Fieldset:
    title: str
    fields: list[Any]  # bound fields
    schedule: str = ""  # the schedule type whose fields these are
    description: str = ""


class PeriodicEntryForm(forms.Form):
    name = forms.CharField(max_length=MAX_NAME_LENGTH, widget=_text(size=60),
                           help_text="Unique; no braces nor control characters. Cannot be changed later.")
    task = forms.CharField(max_length=1000, widget=_text(size=60, list="zset-task-names"),
                           help_text="The task's name, as Celery beat sends it (a task this app does not know "
                                     "is sent by name).")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}))
    enabled = forms.BooleanField(required=False, initial=True,
                                 help_text="A disabled entry never runs, and nothing missed meanwhile is caught up.")
    schedule_type = forms.ChoiceField(choices=SCHEDULE_TYPES, initial="interval", label="Schedule",
                                      widget=forms.RadioSelect(attrs={"class": "radiolist inline"}))
    every = forms.FloatField(required=False, min_value=0.001, label="Every (seconds)",
                             widget=forms.NumberInput(attrs={"step": "any", "size": 10}))
    relative = forms.BooleanField(required=False, help_text="Round to the interval's unit, as Celery's relative "
                                                            "schedule.")
    minute = forms.CharField(required=False, initial="*", widget=_text(size=12))
    hour = forms.CharField(required=False, initial="*", widget=_text(size=12))
    day_of_month = forms.CharField(required=False, initial="*", label="Day of month", widget=_text(size=12))
    month_of_year = forms.CharField(required=False, initial="*", label="Month of year", widget=_text(size=12))
    day_of_week = forms.CharField(required=False, initial="*", label="Day of week", widget=_text(size=12),
                                  help_text="0-6 (0 is Sunday) or mon-sun; Celery's crontab syntax in every field.")
    timezone = forms.CharField(required=False, label="Time zone", widget=_text(size=30, list="zset-time-zones"),
                               help_text="IANA name, e.g. Europe/Berlin; empty: the app's.")
    event = forms.ChoiceField(required=False, choices=[("", "---------")] + [(e, e.replace("_", " "))
                                                                           for e in SOLAR_EVENTS])
    latitude = forms.FloatField(required=False, min_value=-90, max_value=90,
                                widget=forms.NumberInput(attrs={"step": "any"}))
    longitude = forms.FloatField(required=False, min_value=-180, max_value=180,
                                 widget=forms.NumberInput(attrs={"step": "any"}))
    at = MomentField(required=False, label="At", help_text="Runs once at this time. " + TIME_HELP)
    args = JSONTextField(list, label="Arguments", help_text="A JSON list.")
    kwargs = JSONTextField(dict, label="Keyword arguments", help_text="A JSON object.")
    queue = forms.CharField(required=False, widget=_text(size=30))
    exchange = forms.CharField(required=False, widget=_text(size=30))
    routing_key = forms.CharField(required=False, label="Routing key", widget=_text(size=30))
    priority = forms.IntegerField(required=False, min_value=0, max_value=255)
    headers = JSONTextField(dict, help_text="A JSON object of message headers.")
    options = JSONTextField(dict, help_text="A JSON object of other apply_async options (serializer, "
                                            "soft_time_limit...).")
    start_time = MomentField(required=False, label="Start time", help_text="No run before it. " + TIME_HELP)
    end_time = MomentField(required=False, label="End time", help_text="No run after it.")
    expires = MomentField(required=False, help_text="No run at or after it; also each message's expiry.")
    expire_seconds = forms.FloatField(required=False, min_value=0, label="Expire seconds",
                                      help_text="Each message expires this long after it is due.")
    one_off = forms.BooleanField(required=False, label="One-off", help_text="Run once, then never again.")
    catchup = forms.ChoiceField(choices=[(c, c) for c in CATCHUP_POLICIES], initial="once", label="Catch-up",
                                help_text="Runs missed while no dispatcher ran (or while paused): none, the "
                                          "latest, or each.")
    catchup_window = forms.FloatField(required=False, min_value=0.001, label="Catch-up window (seconds)",
                                      help_text="Catch up nothing older; empty: no limit.")
    overlap = forms.ChoiceField(choices=[(o, o.replace("_", " ")) for o in OVERLAP_POLICIES], initial="allow",
                                help_text="While the previous run is pending or running: run anyway, skip, or run "
                                          "right after it.")
    jitter = forms.FloatField(required=False, min_value=0, initial=0, label="Jitter (seconds)",
                              help_text="Each run is due up to this much after its time (the same on every host).")
    revision = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, app: Any, now_ms: int | None = None, current: PeriodicEntry | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app = app
        self.now_ms = now_ms  # Redis time, for the clocked check (only needed when bound)
        self.current = current
        self.entry: PeriodicEntry | None = None
        if current is not None:
            self.fields["name"].disabled = True  # a disabled field's value is its initial one, never the POST's
            self.fields["name"].initial = current.name
            self.fields["name"].help_text = ""

    def fieldsets(self) -> list[Fieldset]:
        def bound(*names: str) -> list[Any]:
            return [self[n] for n in names]

        return [
            Fieldset("Entry", bound("name", "task", "description", "enabled")),
            Fieldset("Schedule", bound("schedule_type")),
            Fieldset("Interval", bound("every", "relative"), "interval"),
            Fieldset("Crontab", bound(*CRON_FIELDS, "timezone"), "crontab",
                     "Fire times follow the zone's wall clock, DST included (Vixie cron's rules)."),
            Fieldset("Solar", bound("event", "latitude", "longitude"), "solar"),
            Fieldset("Clocked (once)", bound("at"), "clocked"),
            Fieldset("Arguments", bound("args", "kwargs")),
            Fieldset("Routing and options", bound("queue", "exchange", "routing_key", "priority", "headers",
                                                  "options")),
            Fieldset("Bounds and expiry", bound("start_time", "end_time", "expires", "expire_seconds", "one_off")),
            Fieldset("Policies", bound("catchup", "catchup_window", "overlap", "jitter")),
        ]

    # -- validation ---------------------------------------------------------------------------

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        if self.errors:
            return data
        spec = self._spec(data)
        if spec is None:
            return data
        entry = PeriodicEntry(
            name=self.current.name if self.current is not None else data["name"], task=data["task"].strip(),
            schedule=spec, args=data["args"], kwargs=data["kwargs"], queue=data["queue"] or None,
            exchange=data["exchange"] or None, routing_key=data["routing_key"] or None, priority=data["priority"],
            headers=data["headers"], options=data["options"], expires=_iso(data["expires"]),
            expire_seconds=data["expire_seconds"], one_off=data["one_off"], start_time=_iso(data["start_time"]),
            end_time=_iso(data["end_time"]), enabled=data["enabled"], description=data["description"],
            catchup=data["catchup"], catchup_window=data["catchup_window"], overlap=data["overlap"],
            jitter=data["jitter"] or 0.0,
            paused=self.current.paused if self.current is not None else False,
            pause_note=self.current.pause_note if self.current is not None else "",
        )
        try:
            self.entry = normalized(self.app, entry)
        except PeriodicEntryError as exc:
            self.refused(exc)
        except ConfigurationError as exc:
            self.add_error(None, str(exc))
        return data

    def refused(self, exc: PeriodicEntryError) -> None:
        """Show an error of the runtime API (or of Celery building the message) on its field."""
        self.add_error(self.field_of(exc.field), exc.reason)

    def field_of(self, field: str | None) -> str | None:
        if field is None:
            return None
        if field == "schedule" and self.cleaned_data.get("schedule_type") == "crontab":
            return "day_of_month"  # each field parses: Celery refuses the day of month in those months
        name = field.removeprefix("schedule.")
        if name in ("schedule", "type"):
            return "schedule_type"
        return name if name in self.fields and not self.fields[name].disabled else None

    def _spec(self, data: dict[str, Any]) -> dict[str, Any] | None:
        kind = data["schedule_type"]

        def need(*names: str) -> bool:
            missing = [n for n in names if data.get(n) in (None, "")]
            for n in missing:
                self.add_error(n, f"This field is required for a{'n' if kind == 'interval' else ''} {kind} "
                                  "schedule.")
            return not missing

        if kind == "interval":
            return {"type": "interval", "every": data["every"], "relative": data["relative"]} if need("every") \
                else None
        if kind == "crontab":
            fields_ = {k: (data[k] or "").strip() or "*" for k in CRON_FIELDS}
            return {"type": "crontab", **fields_, "timezone": (data["timezone"] or "").strip() or None}
        if kind == "solar":
            if not need("event", "latitude", "longitude"):
                return None
            return {"type": "solar", "event": data["event"], "latitude": data["latitude"],
                    "longitude": data["longitude"]}
        if not need("at"):
            return None
        at = ms_to_iso(data["at"])
        own = self.current is not None and self.current.schedule.get("type") == "clocked" and \
            iso_to_ms(self.current.schedule["at"]) == data["at"]
        if not own and self.now_ms is not None and data["at"] <= self.now_ms:
            self.add_error("at", f"{iso(data['at'])} is in the past (Redis time is {iso(self.now_ms)}): "
                                 "a clocked entry runs once, at a time to come.")
            return None
        return {"type": "clocked", "at": at}


def _iso(ms: int | None) -> str | None:
    return None if ms is None else ms_to_iso(ms)


def _number(value: float | None) -> float | int | None:
    return int(value) if value is not None and float(value).is_integer() else value


def initial_of(entry: PeriodicEntry, revision: int) -> dict[str, Any]:
    """The form's initial values for an entry being edited."""
    spec = entry.schedule
    data: dict[str, Any] = {
        "name": entry.name, "task": entry.task, "description": entry.description, "enabled": entry.enabled,
        "schedule_type": spec["type"], "args": json.dumps(entry.args, ensure_ascii=False),
        "kwargs": json.dumps(entry.kwargs, ensure_ascii=False), "queue": entry.queue or "",
        "exchange": entry.exchange or "", "routing_key": entry.routing_key or "", "priority": entry.priority,
        "headers": json.dumps(entry.headers, ensure_ascii=False),
        "options": json.dumps(entry.options, ensure_ascii=False),
        "start_time": entry.start_time or "", "end_time": entry.end_time or "", "expires": entry.expires or "",
        "expire_seconds": _number(entry.expire_seconds), "one_off": entry.one_off, "catchup": entry.catchup,
        "catchup_window": _number(entry.catchup_window), "overlap": entry.overlap, "jitter": _number(entry.jitter),
        "revision": revision,
    }
    if spec["type"] == "interval":
        data.update(every=_number(spec["every"]), relative=spec.get("relative", False))
    elif spec["type"] == "crontab":
        data.update({k: spec[k] for k in CRON_FIELDS}, timezone=spec.get("timezone") or "")
    elif spec["type"] == "solar":
        data.update(event=spec["event"], latitude=_number(spec["latitude"]), longitude=_number(spec["longitude"]))
    else:
        data.update(at=spec["at"])
    return data


def changed_fields(old: PeriodicEntry, new: PeriodicEntry) -> list[str]:
    return [f for f in EDITED if getattr(old, f) != getattr(new, f)]


class PauseForm(forms.Form):
    note = forms.CharField(required=False, max_length=500, widget=_text(size=60),
                           help_text="Why, shown with the entry until it is resumed (optional).")
