"""The pure periodic-entry model: codec, validation, identity, jitter, catch-up, overlap, bounds."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from celery_zset_scheduler.errors import ConfigurationError
from celery_zset_scheduler.model import periodic, periodic_json
from celery_zset_scheduler.model.periodic import (
    MAX_CATCHUP,
    PeriodicEntry,
    PeriodicEntryError,
    PeriodicState,
    after_fire,
    disabled_state,
    iso_to_ms,
    jitter_ms,
    ms_to_iso,
    occurrence_id,
    plan_catchup,
    plan_overlap,
    within_bounds,
)
from celery_zset_scheduler.model.periodic_checks import normalize_schedule, validate
from celery_zset_scheduler.model.periodic_json import entry_from_json, entry_to_json, state_from_json, state_to_json

EVERY_MINUTE = {"type": "interval", "every": 60.0, "relative": False}
CRON = {"type": "crontab", "minute": "*/5", "hour": "9-17", "day_of_week": "mon-fri", "day_of_month": "*",
        "month_of_year": "*", "timezone": "Europe/Berlin"}


def full_entry() -> PeriodicEntry:
    return PeriodicEntry(
        name="reports.nightly", task="proj.tasks.report", schedule=CRON, args=[1, "two", [3]],
        kwargs={"dry": False, "tags": {"a": 1}}, queue="reports", exchange="ex", routing_key="rk", priority=7,
        headers={"h": "v"}, expires="2030-01-01T00:00:00+00:00", one_off=False,
        start_time="2025-01-01T00:00:00+01:00", end_time="2031-01-01T00:00:00Z", enabled=True,
        description="the nightly report", catchup="all", catchup_window=3600.0, overlap="buffer_one",
        jitter=12.5, paused=True, pause_note="waiting for the DB migration",
    )


# -- layering ---------------------------------------------------------------------------------------

def test_model_package_imports_only_stdlib_and_errors() -> None:
    root = Path(periodic.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: this package, or ..errors
                    assert node.level == 1 or (node.level == 2 and node.module == "errors"), (path, node.module)
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name == "celery_zset_scheduler.errors", (path, name)


# -- codec ------------------------------------------------------------------------------------------

def test_json_round_trip_keeps_every_field() -> None:
    entry = full_entry()
    decoded = entry_from_json(entry_to_json(entry))
    assert decoded == entry
    assert [f.name for f in dataclasses.fields(decoded)] == [f.name for f in dataclasses.fields(entry)]


def test_json_is_compact_sorted_and_versioned() -> None:
    text = entry_to_json(full_entry())
    obj = json.loads(text)
    assert obj["v"] == periodic_json.ENTRY_FORMAT_VERSION
    assert text == json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    # The same entry built with kwargs in another order is byte-for-byte the same JSON.
    other = dataclasses.replace(full_entry(), kwargs={"tags": {"a": 1}, "dry": False})
    assert entry_to_json(other) == text


def test_json_writes_defaults_and_fills_schedule_defaults() -> None:
    entry = PeriodicEntry(name="n", task="t", schedule={"type": "crontab", "minute": "0"})
    obj = json.loads(entry_to_json(entry))
    assert obj["catchup"] == "once" and obj["catchup_window"] is None and obj["overlap"] == "allow"
    assert obj["schedule"] == {"type": "crontab", "minute": "0", "hour": "*", "day_of_week": "*",
                               "day_of_month": "*", "month_of_year": "*", "timezone": None}


def test_json_numbers_are_normalised_to_float() -> None:
    text = entry_to_json(PeriodicEntry(name="n", task="t", schedule={"type": "interval", "every": 30}, jitter=2))
    entry = entry_from_json(text.replace('"jitter":2.0', '"jitter":2'))
    assert entry.jitter == 2.0 and isinstance(entry.jitter, float)
    assert entry.schedule == {"type": "interval", "every": 30.0, "relative": False}


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda o: o.update(colour="red"), "colour"),
    (lambda o: o.pop("task"), "task"),
    (lambda o: o.update(args={"a": 1}), "args"),
    (lambda o: o.update(kwargs=[1]), "kwargs"),
    (lambda o: o.update(priority="high"), "priority"),
    (lambda o: o.update(expires="2030-01-01T00:00:00"), "expires"),
    (lambda o: o.update(catchup="sometimes"), "catchup"),
    (lambda o: o.update(jitter=-1), "jitter"),
    (lambda o: o.update(enabled="yes"), "enabled"),
    (lambda o: o.update(schedule={"type": "weekly"}), "schedule.type"),
    (lambda o: o.update(schedule={"type": "interval", "every": 0}), "schedule.every"),
    (lambda o: o.update(schedule={"type": "interval", "every": 5, "jitter": 1}), "schedule.jitter"),
    (lambda o: o.update(schedule={"type": "crontab", "timezone": "Mars/Olympus"}), "schedule.timezone"),
    (lambda o: o.update(schedule={"type": "solar", "event": "sunrise", "latitude": 91, "longitude": 0}),
     "schedule.latitude"),
    (lambda o: o.update(schedule={"type": "clocked", "at": "2030-01-01 10:00"}), "schedule.at"),
    (lambda o: o.update(v=2), "v"),
])
def test_json_rejects_bad_input_naming_the_field(mutate, field) -> None:  # type: ignore[no-untyped-def]
    obj = json.loads(entry_to_json(full_entry()))
    mutate(obj)
    with pytest.raises(PeriodicEntryError) as info:
        entry_from_json(json.dumps(obj))
    assert info.value.field == field
    assert repr(field) in str(info.value)
    assert isinstance(info.value, ConfigurationError)


@pytest.mark.parametrize("data", ["", "not json", "[1, 2]", b"\xff\xfe"])
def test_json_rejects_non_objects(data: str | bytes) -> None:
    with pytest.raises(PeriodicEntryError):
        entry_from_json(data)


def test_state_round_trip_and_errors() -> None:
    state = PeriodicState(next_run_ms=2, last_run_ms=1, total_run_count=3, last_task_id="abc")
    assert state_from_json(state_to_json(state)) == state
    assert state_from_json('{"v":1}') == PeriodicState()
    with pytest.raises(PeriodicEntryError, match="total_run_count"):
        state_from_json('{"v":1,"total_run_count":-1}')
    with pytest.raises(PeriodicEntryError, match="next_run_ms"):
        state_from_json('{"v":1,"next_run_ms":1.5}')
    with pytest.raises(PeriodicEntryError, match="unknown state field"):
        state_from_json('{"v":1,"foo":1}')


# -- validation -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("changes", "field"), [
    ({"name": ""}, "name"),
    ({"name": "a{b}"}, "name"),
    ({"name": "line\nbreak"}, "name"),
    ({"name": "x" * (periodic.MAX_NAME_LENGTH + 1)}, "name"),
    ({"task": " "}, "task"),
    ({"kwargs": {1: "a"}}, "kwargs"),
    ({"kwargs": {"when": object()}}, "kwargs"),
    ({"args": [float("nan")]}, "args"),
    ({"headers": []}, "headers"),
    ({"queue": ""}, "queue"),
    ({"priority": 256}, "priority"),
    ({"priority": True}, "priority"),
    ({"expire_seconds": 5.0}, "expire_seconds"),  # together with expires
    ({"end_time": "2024-01-01T00:00:00+00:00"}, "end_time"),  # before start_time
    ({"catchup_window": 0}, "catchup_window"),
    ({"overlap": "queue"}, "overlap"),
    ({"jitter": float("inf")}, "jitter"),
    ({"pause_note": None}, "pause_note"),
])
def test_validate_names_the_invalid_field(changes: dict[str, object], field: str) -> None:
    entry = dataclasses.replace(full_entry(), **changes)  # type: ignore[arg-type]
    with pytest.raises(PeriodicEntryError) as info:
        validate(entry)
    assert info.value.field == field


def test_validate_accepts_a_full_entry_and_every_schedule_form() -> None:
    validate(full_entry())
    for spec in (EVERY_MINUTE, {"type": "interval", "every": 0.001}, CRON, {"type": "crontab"},
                 {"type": "solar", "event": "dusk_civil", "latitude": -33.9, "longitude": 151.2},
                 {"type": "clocked", "at": "2030-06-01T12:00:00+02:00"}):
        validate(PeriodicEntry(name="n", task="t", schedule=spec))
        assert normalize_schedule(spec)["type"] == spec["type"]


# -- identity and jitter ----------------------------------------------------------------------------

def test_occurrence_id_is_a_fixed_uuid5() -> None:
    oid = occurrence_id("nightly-report", 1_743_296_400_000)
    # Pinned: a change here changes every task id in every deployed store.
    assert oid == "3a78d80c-63e1-575d-b6b1-02ef795d21af"
    assert uuid.UUID(oid).version == 5
    assert occurrence_id("nightly-report", 1_743_296_400_000) == oid
    assert occurrence_id("nightly-report", 1_743_296_400_001) != oid
    assert occurrence_id("nightly-reporT", 1_743_296_400_000) != oid
    # The digits-first key keeps names and times from running into each other.
    assert occurrence_id("1:a", 2) != occurrence_id("a", 12)
    with pytest.raises(TypeError):
        occurrence_id("n", 1.0)  # type: ignore[arg-type]


def test_jitter_is_deterministic_and_bounded() -> None:
    assert jitter_ms("nightly-report", 1_743_296_400_000, 30) == 24326  # pinned, as the id
    values = [jitter_ms("e", t, 10.0) for t in range(0, 60_000 * 2000, 60_000)]
    assert all(0 <= v < 10_000 for v in values)
    assert values == [jitter_ms("e", t, 10.0) for t in range(0, 60_000 * 2000, 60_000)]
    assert min(values) < 500 and max(values) > 9_500  # spread over the whole range
    assert len(set(values)) > 1500
    assert jitter_ms("e", 5, 0.0) == 0
    assert jitter_ms("e", 5, 0.0004) == 0  # less than a millisecond of span
    assert jitter_ms("e", 5, 0.002) in (0, 1)
    with pytest.raises(ValueError):
        jitter_ms("e", 5, -1.0)


def test_id_and_jitter_agree_across_processes_with_other_hash_seeds() -> None:
    code = ("from celery_zset_scheduler.model.periodic import occurrence_id, jitter_ms;"
            "print(occurrence_id('e', 123), jitter_ms('e', 123, 60))")
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(Path(periodic.__file__).parents[2])}
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   check=True).stdout)
    assert outputs == {f"{occurrence_id('e', 123)} {jitter_ms('e', 123, 60)}\n"}


# -- catch-up ---------------------------------------------------------------------------------------

MIN = 60_000
NOW = 1_000 * MIN
MISSED = [NOW - 50 * MIN, NOW - 30 * MIN, NOW - 10 * MIN, NOW - MIN]


def test_catchup_skip_once_all() -> None:
    assert plan_catchup(MISSED, NOW, "skip") == []
    assert plan_catchup(MISSED, NOW, "once") == [NOW - MIN]
    assert plan_catchup(MISSED, NOW, "all") == MISSED
    assert plan_catchup([], NOW, "once") == []


def test_catchup_window_excludes_older_occurrences_inclusive_edge() -> None:
    assert plan_catchup(MISSED, NOW, "all", window=30 * 60) == MISSED[1:]  # exactly now-30min stays
    assert plan_catchup(MISSED, NOW, "all", window=30 * 60 - 0.001) == MISSED[2:]
    assert plan_catchup(MISSED[:1], NOW, "once", window=60) == []
    assert plan_catchup(MISSED, NOW, "once", window=60) == [NOW - MIN]


def test_catchup_ignores_future_times_and_caps_all() -> None:
    assert plan_catchup([*MISSED, NOW, NOW + 1], NOW, "all") == [*MISSED, NOW]
    many = list(range(5000))
    planned = plan_catchup(many, 10_000, "all")
    assert len(planned) == MAX_CATCHUP and planned == many[-MAX_CATCHUP:]


def test_catchup_checks_its_input() -> None:
    with pytest.raises(ValueError, match="ascending"):
        plan_catchup([3, 2], NOW, "all")
    with pytest.raises(ValueError, match="ascending"):
        plan_catchup([2, 2], NOW, "all")
    with pytest.raises(ValueError, match="policy"):
        plan_catchup([1], NOW, "most")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        plan_catchup([1], NOW, "all", window=0)


def test_default_catchup_is_once_without_window() -> None:
    entry = PeriodicEntry(name="n", task="t", schedule=EVERY_MINUTE)
    assert entry.catchup == "once" and entry.catchup_window is None is periodic.DEFAULT_CATCHUP_WINDOW


# -- overlap, bounds, state -------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "running", "buffered", "decision"), [
    ("allow", True, True, "fire"), ("allow", False, False, "fire"),
    ("skip", False, False, "fire"), ("skip", True, False, "skip"),
    ("buffer_one", False, False, "fire"), ("buffer_one", True, False, "buffer"), ("buffer_one", True, True, "skip"),
])
def test_overlap_decisions(policy: periodic.OverlapPolicy, running: bool, buffered: bool, decision: str) -> None:
    assert plan_overlap(policy, running, buffered) == decision


def test_within_bounds() -> None:
    entry = PeriodicEntry(name="n", task="t", schedule=EVERY_MINUTE, start_time=ms_to_iso(1000),
                          end_time=ms_to_iso(5000), expires=None)
    assert [within_bounds(entry, t) for t in (999, 1000, 5000, 5001)] == [False, True, True, False]
    expiring = dataclasses.replace(entry, end_time=None, expires=ms_to_iso(3000))
    assert [within_bounds(expiring, t) for t in (2999, 3000)] == [True, False]


def test_state_transitions() -> None:
    state = PeriodicState(next_run_ms=10, last_run_ms=5, total_run_count=2, last_task_id="x")
    assert disabled_state(state) == PeriodicState(next_run_ms=None, last_run_ms=5, total_run_count=2,
                                                  last_task_id="x")
    fired = after_fire(state, "n", 10, 20)
    assert fired == PeriodicState(next_run_ms=20, last_run_ms=10, total_run_count=3,
                                  last_task_id=occurrence_id("n", 10))


def test_iso_ms_conversions() -> None:
    assert iso_to_ms("1970-01-01T00:00:01Z") == 1000
    assert iso_to_ms("2025-03-30T03:00:00+02:00") == iso_to_ms("2025-03-30T01:00:00+00:00")
    assert ms_to_iso(1_743_296_400_123) == "2025-03-30T01:00:00.123+00:00"
    assert ms_to_iso(-1) == "1969-12-31T23:59:59.999+00:00"
    with pytest.raises(ValueError, match="offset"):
        iso_to_ms("2025-03-30T03:00:00")


def test_split_and_join_keep_every_field_and_share_plans() -> None:
    from celery_zset_scheduler.model.periodic_json import join_entry, split_entry

    full = PeriodicEntry(name="a", task="t.x", schedule={"type": "interval", "every": 60.0, "relative": False},
                         args=[1], kwargs={"k": 2},
                         queue="q", headers={"h": 1}, description="d", catchup="all", jitter=5.0, paused=True,
                         pause_note="why", start_time="2025-01-01T00:00:00+00:00")
    plan, rest = split_entry(full)
    assert join_entry(plan, rest) == full
    assert '"args"' not in plan and '"schedule"' not in rest and '"catchup"' in plan
    other = PeriodicEntry(**{**full.__dict__, "name": "b", "args": [2], "description": "other"})
    assert split_entry(other)[0] == plan  # same schedule and policies: the same bytes
    with pytest.raises(PeriodicEntryError):
        join_entry(plan.replace('"v":1', '"v":2'), rest)
