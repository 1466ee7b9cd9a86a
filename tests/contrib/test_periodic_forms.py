"""Adding and editing periodic entries through the form: Celery's four schedule types, every
field, and bad input shown as a form error on the field it concerns (never a server error, never
a half-written entry). Each change is in Django's admin log."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.test import Client

from celery_zset_scheduler.celery.periodic import runtime as periodic
from celery_zset_scheduler.model.periodic import iso_to_ms, ms_to_iso
from celery_zset_scheduler.store.snapshot import redis_now_ms

from .conftest import BigStore, Users
from .periodic_support import (
    ADD,
    PERIODIC,
    add,
    change_url,
    edit_form,
    field_errors,
    form,
    info,
    non_field_errors,
    unique,
)


def test_add_an_interval_entry_it_is_listed_scheduled_and_logged(big: BigStore, users: Users,
                                                                 as_changer: Client) -> None:
    name = unique("added")
    before = redis_now_ms(big.store)
    response = as_changer.post(ADD, form(name, args='["ops@example.com", "hello"]', kwargs="{}"))
    assert response.status_code == 302 and response["Location"] == f"{PERIODIC}/"
    added = info(big, name)
    assert added.entry.task == "shop.remind" and added.entry.args == ["ops@example.com", "hello"]
    assert added.entry.schedule == {"type": "interval", "every": 30.0, "relative": False}
    assert added.state.next_run_ms is not None and before + 30_000 <= added.state.next_run_ms
    assert added.state.next_run_ms <= redis_now_ms(big.store) + 30_000 and added.look_ms == added.state.next_run_ms
    (entry,) = LogEntry.objects.filter(object_id=name)
    assert entry.user == users.changer and entry.action_flag == ADDITION
    assert entry.change_message == "Added: shop.remind, every 30s."
    page = as_changer.get(f"{PERIODIC}/", {"q": name}, follow=True).content.decode()
    assert "every 30s" in page
    again = as_changer.post(ADD, form(name)).content.decode()
    assert field_errors(again) == {"name": "A periodic entry with this name already exists."}


@pytest.mark.parametrize(("changes", "expected"), [
    ({"schedule_type": "crontab", "minute": "30", "hour": "7", "day_of_week": "mon-fri", "timezone": "Europe/Berlin"},
     {"type": "crontab", "minute": "30", "hour": "7", "day_of_week": "mon-fri", "day_of_month": "*",
      "month_of_year": "*", "timezone": "Europe/Berlin"}),
    ({"schedule_type": "crontab", "minute": "*/15"},  # no zone: the app's, written into the entry
     {"type": "crontab", "minute": "*/15", "hour": "*", "day_of_week": "*", "day_of_month": "*",
      "month_of_year": "*", "timezone": "UTC"}),
    ({"schedule_type": "solar", "event": "sunrise", "latitude": "52.52", "longitude": "13.405"},
     {"type": "solar", "event": "sunrise", "latitude": 52.52, "longitude": 13.405}),
    ({"schedule_type": "clocked", "at": "2999-01-01T09:00:00+01:00"},
     {"type": "clocked", "at": "2999-01-01T08:00:00+00:00"}),
    ({"schedule_type": "interval", "every": "0.5", "relative": "on"}, {"type": "interval", "every": 0.5,
                                                                      "relative": True}),
])
def test_add_with_each_of_celery_s_schedule_types(big: BigStore, as_changer: Client, changes: dict[str, Any],
                                                  expected: dict[str, Any]) -> None:
    name = unique(f"typed-{changes['schedule_type']}")
    response = as_changer.post(ADD, form(name, **{"every": "", **changes}))
    assert response.status_code == 302, field_errors(response.content.decode())
    added = info(big, name)
    assert added.entry.schedule == expected
    assert added.state.next_run_ms is not None and added.state.next_run_ms > redis_now_ms(big.store)


def test_every_field_of_the_form_is_stored(big: BigStore, as_changer: Client) -> None:
    name = unique("full")
    data = form(name, description="the morning report", args='[1, "two"]', kwargs='{"three": 3}',
                queue="reports", exchange="reports-x", routing_key="reports.daily", priority="7",
                headers='{"x-team": "ops"}', options='{"soft_time_limit": 30}', start_time="2030-01-01T00:00:00Z",
                end_time="2040-01-01T00:00:00Z", expire_seconds="300", one_off="on", catchup="all",
                catchup_window="3600", overlap="buffer_one", jitter="2.5", enabled=None)
    assert as_changer.post(ADD, data).status_code == 302
    entry = info(big, name).entry
    assert (entry.description, entry.args, entry.kwargs, entry.queue, entry.exchange, entry.routing_key,
            entry.priority, entry.headers, entry.options) == (
        "the morning report", [1, "two"], {"three": 3}, "reports", "reports-x", "reports.daily", 7,
        {"x-team": "ops"}, {"soft_time_limit": 30})
    assert iso_to_ms(entry.start_time or "") == 1893456000000 and iso_to_ms(entry.end_time or "") == 2208988800000
    assert (entry.expire_seconds, entry.one_off, entry.catchup, entry.catchup_window, entry.overlap, entry.jitter,
            entry.enabled) == (300.0, True, "all", 3600.0, "buffer_one", 2.5, False)
    assert info(big, name).state.next_run_ms is None  # disabled: no next run


@pytest.mark.parametrize(("changes", "field", "says"), [
    ({"schedule_type": "crontab", "minute": "61"}, "minute", "Celery cannot parse '61'"),
    ({"schedule_type": "crontab", "hour": "7-99"}, "hour", "Celery cannot parse '7-99'"),
    ({"schedule_type": "crontab", "day_of_week": "funday"}, "day_of_week", "Celery cannot parse 'funday'"),
    ({"schedule_type": "crontab", "day_of_month": "30", "month_of_year": "2"}, "day_of_month", "30"),
    ({"schedule_type": "crontab", "timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
    ({"schedule_type": "clocked", "at": "2001-01-01T00:00:00Z"}, "at", "is in the past"),
    ({"schedule_type": "clocked", "at": "-5m"}, "at", "is in the past"),
    ({"schedule_type": "clocked", "at": "next tuesday"}, "at", "expected an ISO 8601 date-time"),
    ({"schedule_type": "clocked"}, "at", "required for a clocked schedule"),
    ({"every": ""}, "every", "required for an interval schedule"),
    ({"every": "0"}, "every", "greater than or equal to 0.001"),
    ({"every": "nan"}, "every", "Enter a number"),
    ({"schedule_type": "solar", "event": "sunrise", "latitude": "95", "longitude": "0"}, "latitude", "less than"),
    ({"schedule_type": "solar", "latitude": "1", "longitude": "1"}, "event", "required for a solar schedule"),
    ({"schedule_type": "weekly"}, "schedule_type", "Select a valid choice"),
    ({"args": "[1, 2"}, "args", "not valid JSON"),
    ({"args": '{"a": 1}'}, "args", "must be a JSON list"),
    ({"kwargs": "[1]"}, "kwargs", "must be a JSON object"),
    ({"kwargs": '{"a": NaN}'}, "kwargs", "NaN is not JSON"),
    ({"headers": "nope"}, "headers", "not valid JSON"),
    ({"options": '{"countdown": 5}'}, "options", "'countdown' cannot be an option"),
    ({"name": "bad{name}"}, "name", "must not contain '{' or '}'"),
    ({"name": ""}, "name", "This field is required"),
    ({"task": "  "}, "task", "This field is required"),
    ({"priority": "300"}, "priority", "less than or equal to 255"),
    ({"start_time": "2030-01-02T00:00:00Z", "end_time": "2030-01-01T00:00:00Z"}, "end_time", "is before start_time"),
    ({"expires": "2030-01-01T00:00:00Z", "expire_seconds": "60"}, "expire_seconds", "at most one of expires"),
    ({"catchup": "sometimes"}, "catchup", "Select a valid choice"),
    ({"jitter": "-1"}, "jitter", "greater than or equal to 0"),
])
def test_bad_input_is_a_form_error_on_its_field_and_nothing_is_written(
    big: BigStore, as_changer: Client, changes: dict[str, Any], field: str, says: str,
) -> None:
    name = changes.pop("name", None)
    name = unique("refused") if name is None else name
    response = as_changer.post(ADD, form(name, **changes))
    assert response.status_code == 200
    page = response.content.decode()
    errors = field_errors(page)
    assert list(errors) == [field] and says in errors[field], errors
    assert "Please correct the error below." in page
    if name:
        assert periodic.get(big.app, name) is None
    assert not LogEntry.objects.exists()


def test_edit_changes_the_definition_and_logs_which_fields(big: BigStore, users: Users, as_changer: Client) -> None:
    name = unique("edited")
    add(big, name, every=3600.0)
    old = info(big, name)
    data = edit_form(big, name, schedule_type="crontab", minute="0", hour="6", timezone="America/New_York",
                     kwargs='{"user": "ceo@example.com", "text": "good morning"}', description="now at six")
    response = as_changer.post(change_url(name), data, follow=True)
    assert f"The periodic entry “{name}” was changed successfully." in response.content.decode()
    new = info(big, name)
    assert new.entry.schedule["type"] == "crontab" and new.entry.schedule["timezone"] == "America/New_York"
    assert new.entry.kwargs == {"user": "ceo@example.com", "text": "good morning"}
    assert new.state.next_run_ms != old.state.next_run_ms and new.state.revision == old.state.revision + 1
    (entry,) = LogEntry.objects.filter(object_id=name)
    assert entry.user == users.changer and entry.action_flag == CHANGE
    assert entry.change_message == "Changed schedule, kwargs, description."


def test_saving_an_unchanged_form_changes_nothing(big: BigStore, as_changer: Client) -> None:
    name = unique("untouched")
    add(big, name, queue="q1", options={"soft_time_limit": 10})
    old = info(big, name)
    page = as_changer.post(change_url(name), edit_form(big, name), follow=True).content.decode()
    assert "No fields changed." in page
    new = info(big, name)
    assert new.entry == old.entry and new.state == old.state and not LogEntry.objects.exists()


def test_an_edit_of_a_stale_page_is_refused(big: BigStore, as_changer: Client) -> None:
    name = unique("stale")
    add(big, name)
    data = edit_form(big, name, description="my edit")
    periodic.pause(big.app, name, note="someone else")  # meanwhile
    page = as_changer.post(change_url(name), data).content.decode()
    assert "changed by someone else after this page was opened" in non_field_errors(page)
    entry = info(big, name).entry
    assert entry.description == "" and entry.paused and entry.pause_note == "someone else"


def test_the_name_cannot_be_changed_and_the_pause_survives_an_edit(big: BigStore, as_changer: Client) -> None:
    name = unique("named")
    add(big, name)
    periodic.pause(big.app, name, note="hold")
    as_changer.post(change_url(name), edit_form(big, name, name="renamed", every="60"))
    entry = info(big, name).entry
    assert entry.schedule["every"] == 60.0 and entry.paused and entry.pause_note == "hold"
    assert periodic.get(big.app, "renamed") is None


def test_a_finished_clocked_entry_can_still_be_edited_but_not_moved_into_the_past(big: BigStore,
                                                                                 as_changer: Client) -> None:
    name = unique("clocked")
    soon = redis_now_ms(big.store) + 400
    periodic.add(big.app, name, "shop.cleanup", {"type": "clocked", "at": ms_to_iso(soon)})
    while redis_now_ms(big.store) <= soon:
        pass
    response = as_changer.post(change_url(name), edit_form(big, name, description="ran already"))
    assert response.status_code == 302, field_errors(response.content.decode())
    assert info(big, name).entry.description == "ran already"
    moved = as_changer.post(change_url(name), edit_form(big, name, at="2001-01-01T00:00:00Z")).content.decode()
    assert "is in the past" in field_errors(moved)["at"]


def test_save_and_continue_and_save_and_add_another(big: BigStore, as_changer: Client) -> None:
    name = unique("continued")
    response = as_changer.post(ADD, {**form(name), "_continue": "1"})
    assert response["Location"] == change_url(name)
    other = unique("another")
    assert as_changer.post(ADD, {**form(other), "_addanother": "1"})["Location"] == ADD
    page = as_changer.get(change_url(name)).content.decode()
    assert f'value="{name}"' in page and "disabled" in page.split('name="name"')[1].split(">")[0]
