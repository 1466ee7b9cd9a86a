"""The runtime API of periodic entries (``celery_zset_scheduler.periodic``): add, update, remove,
enable, disable, pause, resume, run_now, backfill, get, list.

Every change is a read-modify-write of one entry: read it with the Redis time, compute the new
definition, template and state (Celery's schedule classes give the next fire time), write it with a
compare-and-set on the state read. A leader firing the entry meanwhile makes the write fail and it
is done again on what the leader wrote, so a change never loses a fire nor undoes one. Running
dispatchers see a change at once: the write puts the entry's next fire time in its shard's
``next`` ZSET and wakes the leader when it is earlier than the leader's planned look.

Disable forgets, pause remembers (:mod:`...model.periodic`): ``disable`` removes the next run,
``enable`` starts after the instant it is enabled; ``pause`` freezes the next run, ``resume`` puts
it back, and the leader treats what fell due meanwhile as missed (the entry's catch-up policy).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ...errors import ConfigurationError, PoisonMessage, ZSetSchedulerError
from ...model.codec import StoredMessage, decode, encode
from ...model.cursors import decode_cursor, encode_cursor
from ...model.periodic import PeriodicEntry, PeriodicEntryError, PeriodicState, after_fire, ms_to_iso, occurrence_id
from ...model.periodic_json import join_entry, state_from_json
from ...store.periodic import Occurrence, write_call
from .changes import Current, Status, Write, change_entry, next_look, periodic_store, read_entry, write_args
from .entries import Templates, app_zone, build_template, normalized
from .fire_times import first_run_ms
from .schedules import spec_of
from .times import backfill_times, initial_next

__all__ = [
    "PeriodicInfo",
    "PeriodicPage",
    "add",
    "add_entry",
    "add_many",
    "backfill",
    "backfill_preview",
    "disable",
    "enable",
    "get",
    "list_entries",
    "pause",
    "remove",
    "resume",
    "run_now",
    "update",
    "upsert",
]

BACKFILL_CHUNK = 500
#: Fields whose change moves the next run (it is computed again from now).
TIMING = ("schedule", "start_time", "end_time", "expires", "one_off")


@dataclass(frozen=True)
class PeriodicInfo:
    entry: PeriodicEntry
    state: PeriodicState
    shard: int
    from_config: bool  # written by the beat_schedule sync (a later sync may change or remove it)
    look_ms: int | None = None  # when its leader looks at it next (None: never; only from get())
    message: StoredMessage | None = None  # the message its occurrences get (only from get())


@dataclass(frozen=True)
class PeriodicPage:
    entries: list[PeriodicInfo]
    cursor: str | None  # pass back to list_entries for the next page; None at the end


# -- creating -----------------------------------------------------------------------------------

def add(app: Any, name: str, task: str, schedule: Any, *, replace_existing: bool = False,
        **fields_: Any) -> PeriodicInfo:
    """Add an entry. ``schedule``: seconds, a ``timedelta``, a Celery ``schedule``/``crontab``/``solar``,
    ``schedules.clocked``, or a spec dict; ``fields_``: the other :class:`PeriodicEntry` fields.
    An existing name raises :class:`PeriodicEntryError`, unless ``replace_existing`` (then its
    definition is replaced, its run history kept, as :func:`update` does)."""
    spec = schedule if isinstance(schedule, Mapping) else spec_of(schedule)
    entry = PeriodicEntry(name=name, task=task, schedule=dict(spec), **fields_)
    return add_entry(app, entry, replace_existing=replace_existing)


def add_entry(app: Any, entry: PeriodicEntry, *, state: PeriodicState | None = None,
              replace_existing: bool = False) -> PeriodicInfo:
    """Add a whole :class:`PeriodicEntry` (``state``: run history to start from, e.g. imported)."""
    status = add_many(app, [(entry, state or PeriodicState())], replace_existing=replace_existing)[entry.name]
    if status == "exists":
        raise PeriodicEntryError("already exists (pass replace_existing=True, or use update)", "name", entry.name)
    info = get(app, entry.name)
    if info is None:  # removed in between
        raise ZSetSchedulerError(f"periodic entry {entry.name!r} was removed while it was added")
    return info


def add_many(app: Any, entries: Iterable[PeriodicEntry | tuple[PeriodicEntry, PeriodicState]], *,
             replace_existing: bool = False, chunk: int = 500) -> dict[str, Status]:
    """Add many entries, pipelined: ``{name: "added" | "exists" | "updated" | "unchanged"}``.

    Without ``replace_existing`` an existing name is left as it is ("exists"); with it, the entry
    is updated as by :func:`update` (its state kept)."""
    ps = periodic_store(app)
    out: dict[str, Status] = {}
    batch: list[tuple[PeriodicEntry, PeriodicState, bytes]] = []
    templates = Templates(app)
    zone = app_zone(app)

    def flush() -> None:
        now = ps.read(batch[0][0].name).now_ms
        calls = []
        firsts: dict[Any, int | None] = {}  # entries sharing a schedule and bounds share their first run
        for entry, state, template in batch:
            key = (json.dumps(entry.schedule, sort_keys=True), entry.start_time, entry.end_time, entry.expires,
                   entry.enabled, entry.one_off, state.next_run_ms, state.last_run_ms, state.total_run_count > 0)
            if key not in firsts:
                firsts[key] = initial_next(entry, state, now, zone)
            state = replace(state, next_run_ms=firsts[key], buffered_ms=None)
            write = Write("added", entry, state, template, next_look(entry, state))
            calls.append(write_call(ps.keys, entry.name, **write_args(write, "new", None)))
        for (entry, _state, template), (ok, _) in zip(batch, ps.write_many(calls), strict=True):
            out[entry.name] = "added" if ok else "exists"
            if not ok and replace_existing:
                out[entry.name] = _replace(app, entry, template)
        batch.clear()

    for item in entries:
        entry, state = item if isinstance(item, tuple) else (item, PeriodicState())
        entry = normalized(app, entry)
        batch.append((entry, state, templates.build(entry)))
        if len(batch) >= chunk:
            flush()
    if batch:
        flush()
    return out


def upsert(app: Any, entry: PeriodicEntry, template: bytes, *, keep_switches: bool) -> Status:
    """Create ``entry`` or give the existing one its definition (``"added"``, ``"updated"``,
    ``"unchanged"``); ``entry`` is normalised and ``template`` built for it (the sync's path)."""
    ps = periodic_store(app)
    state = PeriodicState()
    now = ps.read(entry.name).now_ms
    state = replace(state, next_run_ms=initial_next(entry, state, now, app_zone(app)))
    write = Write("added", entry, state, template, next_look(entry, state))
    ok, _ = ps.write(entry.name, **write_args(write, "new", None))
    return "added" if ok else _replace(app, entry, template, keep_switches=keep_switches)


def _replace(app: Any, new: PeriodicEntry, template: bytes, *, keep_switches: bool = False) -> Status:
    """Give an existing entry the definition ``new`` (its state kept). ``keep_switches``: keep its
    ``enabled``/``paused``/``pause_note`` (what operators switch at run time)."""

    def plan(current: Current) -> Write | Status:
        entry = new
        if keep_switches:
            entry = replace(new, enabled=current.entry.enabled, paused=current.entry.paused,
                            pause_note=current.entry.pause_note)
        return _transition(app, current, entry, template, "updated")

    return change_entry(app, new.name, plan)


def _transition(app: Any, current: Current, new: PeriodicEntry, template: bytes | None,
                status: Status) -> Write | Status:
    """The write that turns the current entry into ``new``."""
    old, state, now = current.entry, current.state, current.now_ms
    if new == old and template in (None, current.record.template):
        return "unchanged"
    state = replace(state, revision=state.revision + 1)
    timing = any(getattr(old, f) != getattr(new, f) for f in TIMING)
    if not new.enabled:
        state = replace(state, next_run_ms=None, buffered_ms=None)
    elif not old.enabled or timing or state.next_run_ms is None:
        # Enabled now, or another schedule: it starts after now (nothing before counts as missed).
        state = replace(state, next_run_ms=first_run_ms(new, now, app_zone(app)), buffered_ms=None)
    return Write(status, new, state, template if template is not None else build_template(app, new),
                  next_look(new, state))


# -- changing -----------------------------------------------------------------------------------

def update(app: Any, name: str, /, **changes: Any) -> Status:
    """Change fields of an entry (``schedule`` may be any form :func:`add` takes). A change of its
    timing (schedule, bounds, one_off) starts it again after now. ``"updated"``, ``"unchanged"``
    or ``"unknown"``."""
    if "name" in changes:
        raise PeriodicEntryError("cannot be changed (add the entry under the new name, remove the old one)",
                                 "name", name)
    unknown = sorted(set(changes) - {f.name for f in fields(PeriodicEntry)})
    if unknown:
        raise PeriodicEntryError("unknown field", unknown[0], name)
    if "schedule" in changes and not isinstance(changes["schedule"], Mapping):
        changes["schedule"] = spec_of(changes["schedule"])

    def plan(current: Current) -> Write | Status:
        new = normalized(app, replace(current.entry, **changes))
        return _transition(app, current, new, None, "updated")

    return change_entry(app, name, plan)


def _switch(app: Any, names: Iterable[str], status: Status, change: Callable[[PeriodicEntry], PeriodicEntry],
            look: Callable[[Current, PeriodicEntry], int | None] | None = None) -> dict[str, Status]:
    def plan(current: Current) -> Write | Status:
        new = change(current.entry)
        if new == current.entry:
            return "unchanged"
        if look is None:
            return _transition(app, current, new, current.record.template, status)
        state = replace(current.state, revision=current.state.revision + 1)
        return Write(status, new, state, None, look(current, new))

    return {name: change_entry(app, name, plan) for name in dict.fromkeys(names)}


def enable(app: Any, *names: str) -> dict[str, Status]:
    """Enable entries: each runs next at its first fire time after now."""
    return _switch(app, names, "enabled", lambda e: replace(e, enabled=True))


def disable(app: Any, *names: str) -> dict[str, Status]:
    """Disable entries: no next run; what falls due while disabled is never caught up."""
    return _switch(app, names, "disabled", lambda e: replace(e, enabled=False))


def pause(app: Any, *names: str, note: str = "") -> dict[str, Status]:
    """Pause entries: nothing fires, the next run is kept for :func:`resume`. ``note`` says why
    (an entry already paused keeps its note unless another is given)."""
    return _switch(app, names, "paused", lambda e: replace(e, paused=True, pause_note=note or e.pause_note),
                   lambda current, new: None)


def resume(app: Any, *names: str) -> dict[str, Status]:
    """Resume paused entries: what fell due while paused follows each entry's catch-up policy."""

    def look(current: Current, new: PeriodicEntry) -> int | None:
        return next_look(new, current.state)

    return _switch(app, names, "resumed", lambda e: replace(e, paused=False, pause_note=""), look)


def remove(app: Any, *names: str) -> dict[str, Status]:
    """Remove entries (their occurrences already stored still run). ``removed`` or ``unknown``."""
    ps = periodic_store(app)
    out: dict[str, Status] = {}
    for name in dict.fromkeys(names):
        status = change_entry(app, name, lambda current: Write("removed", None, current.state))
        if status == "removed":
            ps.set_config(name, None)  # a later sync adds it again only if beat_schedule still has it
        out[name] = status
    return out


# -- running ------------------------------------------------------------------------------------

def _with_expiry(entry: PeriodicEntry, template: bytes | None, task_id: str, due_ms: int) -> bytes | None:
    if entry.expire_seconds is None or template is None:
        return None
    try:
        message = decode(task_id, template)
    except PoisonMessage:
        return None
    return encode(message.with_headers(expires=ms_to_iso(due_ms + int(entry.expire_seconds * 1000))))


def run_now(app: Any, *names: str) -> dict[str, str | None]:
    """Store one occurrence of each entry, due now (Redis time), whatever its schedule, state or
    overlap policy (its end is then waited for like a scheduled one's). ``{name: task id}``, None
    for an unknown name. The next scheduled run does not move."""
    ids: dict[str, str | None] = {}

    def plan(current: Current) -> Write:
        entry, now = current.entry, current.now_ms
        task_id = occurrence_id(entry.name, now)
        ids[entry.name] = task_id
        occurrence = Occurrence(task_id, now, _with_expiry(entry, current.record.template, task_id, now))
        state = after_fire(current.state, entry.name, now, current.state.next_run_ms)
        return Write("triggered", entry, state, None, current.record.look_ms,
                      "f" if entry.overlap != "allow" else "", [occurrence])

    for name in dict.fromkeys(names):
        ids[name] = None
        if change_entry(app, name, plan) == "unknown":
            ids[name] = None
    return ids


def backfill_preview(app: Any, name: str, start_ms: int, end_ms: int) -> list[int]:
    """The fire times :func:`backfill` would store (nothing is written)."""
    current = read_entry(periodic_store(app), name)
    if current is None:
        raise PeriodicEntryError("no such entry", "name", name)
    if end_ms < start_ms:
        raise ConfigurationError("backfill: the end is before the start")
    if end_ms > current.now_ms:
        raise ConfigurationError("backfill covers the past only (use run-now for an occurrence now)")
    return backfill_times(current.entry, current.state, start_ms, end_ms, app_zone(app))


def backfill(app: Any, name: str, start_ms: int, end_ms: int) -> list[tuple[int, str]]:
    """Store every occurrence of ``name`` whose fire time is in ``[start_ms, end_ms]`` (the past), due
    now in fire-time order, each with its deterministic id (one still pending is not stored twice).
    The overlap policy is not applied. Returns ``(fire ms, task id)`` of each."""
    times = backfill_preview(app, name, start_ms, end_ms)
    ids: list[tuple[int, str]] = []
    for start in range(0, len(times), BACKFILL_CHUNK):
        chunk = times[start:start + BACKFILL_CHUNK]

        def plan(current: Current, chunk: list[int] = chunk) -> Write:
            state, occurrences = current.state, []
            for i, fire in enumerate(chunk):
                task_id = occurrence_id(name, fire)
                due = current.now_ms + i  # one millisecond apart: handed over in fire-time order
                occurrences.append(Occurrence(task_id, due, _with_expiry(current.entry, current.record.template,
                                                                         task_id, due)))
                state = after_fire(state, name, fire, state.next_run_ms)
            return Write("backfilled", current.entry, state, None, current.record.look_ms, "", occurrences)

        if change_entry(app, name, plan) == "unknown":
            raise PeriodicEntryError("was removed during the backfill", "name", name)
        ids += [(t, occurrence_id(name, t)) for t in chunk]
    return ids


# -- reading ------------------------------------------------------------------------------------

def get(app: Any, name: str) -> PeriodicInfo | None:
    """An entry, its state, shard, origin, next look and the message its occurrences get."""
    ps = periodic_store(app)
    current = read_entry(ps, name)
    if current is None:
        return None
    message = None
    if current.record.template is not None:
        try:
            message = decode(occurrence_id(name, current.now_ms), current.record.template)
        except PoisonMessage:
            message = None
    return PeriodicInfo(current.entry, current.state, ps.keys.shard_of(name), bool(ps.config_names([name])),
                        current.record.look_ms, message)


def list_entries(app: Any, *, limit: int = 100, cursor: str | None = None) -> PeriodicPage:
    """A page of entries in name order (byte order); pass ``cursor`` back for the next page."""
    ps = periodic_store(app)
    after = None if cursor is None else str(decode_cursor("periodic", {}, cursor))
    names = ps.names_after(after, limit + 1)
    more, names = len(names) > limit, names[:limit]
    records = ps.records(names)
    configured = ps.config_names(names)
    entries = []
    for name in names:
        definition, plan, state = records[name]
        if definition is None or plan is None or state is None:
            continue  # removed between the two reads
        entries.append(PeriodicInfo(join_entry(plan, definition), state_from_json(state), ps.keys.shard_of(name),
                                    name in configured))
    return PeriodicPage(entries, encode_cursor("periodic", {}, names[-1]) if more and names else None)

