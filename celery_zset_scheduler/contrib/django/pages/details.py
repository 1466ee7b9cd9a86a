"""The sections of a detail page (a scheduled task, a dead letter, a periodic entry) from the views
of ``ops.views`` and ``ops.periodic``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ....celery.cli.output import number, relative
from ....model.times import iso
from ....ops.periodic import describe, status_of


@dataclass(frozen=True)
class Row:
    label: str
    value: str
    pre: bool = False  # shown as a block of code (JSON, a traceback)


@dataclass(frozen=True)
class Section:
    title: str
    rows: list[Row]


def plural(n: int, word: str, many: str | None = None) -> str:
    """"1 dead letter", "3 dead letters"; ``many`` when the plural is not ``word + "s"``."""
    return f"{number(n)} {word if n == 1 else many or word + 's'}"


def selected(n: int, word: str, many: str | None = None) -> str:
    """"the selected dead letter", "the 3 selected dead letters"."""
    return f"the selected {word}" if n == 1 else f"the {number(n)} selected {many or word + 's'}"


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str, ensure_ascii=False, sort_keys=True)


def message_sections(message: dict[str, Any], prefix: str = "") -> list[Section]:
    """Arguments, routing, headers and properties of a ``message_view``."""
    body = message.get("body_note")
    arguments = [Row("Arguments", as_json(message["args"]), True),
                 Row("Keyword arguments", as_json(message["kwargs"]), True)] if body is None else [
                 Row("Body", body)]
    routing = message["routing"]
    headers = {k: v for k, v in message["headers"].items() if v not in (None, [], {}, [None, None])}
    return [
        Section(prefix + "Arguments", arguments),
        Section(prefix + "Routing", [
            Row("Queue", routing["queue"] or "-"),
            Row("Exchange", routing["exchange"] or "''"),
            Row("Routing key", routing["routing_key"] or "''"),
            Row("Priority", "-" if routing["priority"] is None else str(routing["priority"])),
            Row("Content", f"{message['content_type']} ({message['content_encoding']}), "
                           f"{number(message['body_bytes'])} bytes"),
        ]),
        Section(prefix + "Headers", [_value_row(k, v) for k, v in sorted(headers.items())]),
        Section(prefix + "Properties", [Row(k, str(v)) for k, v in sorted(message["properties"].items())]),
    ]


def _value_row(label: str, value: Any) -> Row:
    nested = isinstance(value, (dict, list))
    return Row(label, as_json(value) if nested else str(value), nested)


def entry_sections(view: dict[str, Any], state: str) -> list[Section]:
    """A scheduled task (``entry_view``)."""
    first = Section("Task", [
        Row("ID", view["id"]),
        Row("Task", view.get("task") or "?"),
        Row("State", state),
        Row("Due", view["due"] or "-"),
        Row("Shard", str(view["shard"])),
        Row("Stored size", f"{number(view['stored_bytes'])} bytes"),
    ])
    if view["error"]:
        return [first, Section("Error", [Row("Not decodable", view["error"])])]
    return [first, *message_sections(view)]


def letter_sections(view: dict[str, Any]) -> list[Section]:
    """A dead letter (``letter_view`` with ``full=True``)."""
    exception = f"{view['exc_type']}: {view['exc_message']}" if view["exc_type"] else view["exc_message"]
    first = Section("Dead letter", [
        Row("ID", view["id"]),
        Row("Task", view["task"] or "?"),
        Row("Reason", view["reason"]),
        Row("Exception", exception or "-"),
        Row("Attempts", str(view["attempts"])),
        Row("Dead-lettered", view["dead_lettered"] or "-"),
        Row("First failure", iso(view["first_failure_ms"]) or "-"),
        Row("Last failure", iso(view["last_failure_ms"]) or "-"),
        Row("Worker", view["worker"] or "-"),
        *([Row("Extra", as_json(view["extra"]), True)] if view["extra"] else []),
    ])
    sections = [first]
    message = view["message"]
    if message is None:
        sections.append(Section("Original message", [Row("Not decodable", view["error"] or "-")]))
        if view["args"] is not None or view["kwargs"] is not None:
            sections.append(Section("Arguments", [Row("Arguments", as_json(view["args"]), True),
                                                  Row("Keyword arguments", as_json(view["kwargs"]), True)]))
        return sections
    return sections + message_sections(message, "Original message: ")


def periodic_sections(info: Any, now_ms: int, *, definition: bool) -> list[Section]:
    """A periodic entry (a ``PeriodicInfo``): its state; with ``definition``, every field too (the
    view-only page: with the change permission the form shows them)."""
    entry, state = info.entry, info.state
    status = status_of(entry, state)
    if entry.paused and entry.pause_note:
        status += f": {entry.pause_note}"

    def when(ms: int | None) -> str:
        return "-" if ms is None else f"{iso(ms)} ({relative(ms, now_ms)})"

    source = ("beat_schedule: a dispatcher start syncs it with the configuration again (keeping enabled and "
              "paused)" if info.from_config else "runtime (the API, the CLI or this page)")
    rows = [
        Row("Status", status),
        Row("Schedule", describe(entry.schedule)),
        Row("Next run", when(state.next_run_ms)),
        Row("Last run", when(state.last_run_ms)),
        Row("Run count", number(state.total_run_count)),
        Row("Last task ID", state.last_task_id or "-"),
        *([Row("Buffered run", when(state.buffered_ms))] if state.buffered_ms is not None else []),
        Row("Shard", str(info.shard)),
        Row("Next look by its shard's leader", when(info.look_ms)),
        Row("Source", source),
    ]
    sections = [Section("State", rows)]
    message = info.message
    if message is not None:
        sections.append(Section("Message (as Celery builds it for each run)", [
            Row("Queue", message.queue or "-"),
            Row("Exchange", message.exchange or "''"),
            Row("Routing key", message.routing_key or "''"),
            Row("Priority", "-" if message.properties.get("priority") is None else str(message.properties["priority"])),
        ]))
    if not definition:
        return sections
    optional = {k: getattr(entry, k) for k in ("queue", "exchange", "routing_key", "priority", "start_time",
                                                 "end_time", "expires", "expire_seconds", "catchup_window")}
    return [*sections, Section("Definition", [
        Row("Task", entry.task),
        Row("Schedule spec", as_json(entry.schedule), True),
        Row("Arguments", as_json(entry.args), True),
        Row("Keyword arguments", as_json(entry.kwargs), True),
        *[Row(k.replace("_", " ").capitalize(), "-" if v is None else str(v)) for k, v in optional.items()],
        Row("Headers", as_json(entry.headers), True),
        Row("Options", as_json(entry.options), True),
        Row("Enabled", "yes" if entry.enabled else "no"),
        Row("One-off", "yes" if entry.one_off else "no"),
        Row("Catch-up", entry.catchup),
        Row("Overlap", entry.overlap),
        Row("Jitter", f"{entry.jitter:g}s"),
        Row("Description", entry.description or "-"),
    ])]
