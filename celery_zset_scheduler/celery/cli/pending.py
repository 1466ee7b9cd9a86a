"""``celery zset ls`` and ``show``: pending tasks, a page at a time, and one stored task."""

from __future__ import annotations

import json
from typing import Any

import click

from ...model.cursors import InvalidCursor
from ...model.times import Moment, iso
from ...ops import pending as ops
from ...ops.pending import Listing, list_pending
from ...store.snapshot import redis_now_ms
from ..core.messages import decompress
from .group import store_of
from .options import (
    common,
    compose,
    cursor_option,
    limit_option,
    moment_ms,
    pending_filters,
    scan_limit_option,
    text_of,
)
from .output import CommandError, ExitCode, emit_json, relative, table


def listing_json(listing: Listing) -> dict[str, Any]:
    return {
        "tasks": [
            {"id": e.task_id, "task": e.task_name, "shard": e.shard, "due_ms": e.due_ms, "due": iso(e.due_ms)}
            for e in listing.entries
        ],
        "cursor": listing.cursor,
        "scanned": listing.scanned,
    }


@click.command(name="ls")
@compose(common, pending_filters, limit_option, cursor_option, scan_limit_option)
@click.pass_context
def ls(
    ctx: click.Context, as_json: bool, task_name: str | None, due_before: Moment | None,
    due_after: Moment | None, shards: tuple[int, ...], limit: int, cursor: str | None, scan_limit: int,
) -> None:
    """List pending tasks by due time, a page at a time (never a scan of the whole store)."""
    store = store_of(ctx)
    bad = sorted(s for s in shards if s >= store.shards)
    if bad:
        raise click.BadParameter(f"{bad}: the store has shards 0..{store.shards - 1}", param_hint="--shard")
    try:
        listing = list_pending(
            store, shards=list(shards) or None, min_due=moment_ms(due_after),
            max_due=moment_ms(due_before), task_name=task_name, limit=limit, cursor=cursor,
            scan_limit=scan_limit, bounds=[text_of(due_after), text_of(due_before)],
        )
    except InvalidCursor as exc:
        raise click.BadParameter(str(exc), param_hint="--cursor") from None
    if as_json:
        emit_json(listing_json(listing))
        return
    now = redis_now_ms(store)
    rows = [(e.task_id, e.task_name or "?", iso(e.due_ms), relative(e.due_ms, now), e.shard)
            for e in listing.entries]
    if rows:
        click.echo(table(["ID", "TASK", "DUE", "", "SHARD"], rows, right=(4,)))
    else:
        click.echo("no pending tasks match" + (" among the entries scanned" if listing.cursor else ""))
    if listing.cursor:
        click.echo(f"\nmore: --cursor {listing.cursor}", err=True)


@click.command()
@common
@click.argument("task_id")
@click.pass_context
def show(ctx: click.Context, as_json: bool, task_id: str) -> None:
    """Show a stored task: name, args, kwargs, headers, routing, due time and shard."""
    store = store_of(ctx)
    view = ops.show(store, task_id, decompress)
    if view is None:
        raise CommandError(f"no pending or in-flight task with id {task_id!r}", ExitCode.NOT_FOUND)
    if as_json:
        emit_json(view)
        return
    now = redis_now_ms(store)
    when = (f"due {view['due']} ({relative(view['due_ms'], now)})" if view["state"] == "pending"
            else f"in flight: being published (lease until {iso(view['lease_deadline_ms'])})")
    lines = [
        ("id", view["id"]),
        ("task", view["task"] or "?"),
        ("state", when),
        ("shard", view["shard"]),
    ]
    if view["error"]:
        lines.append(("error", view["error"]))
    else:
        routing = view["routing"]
        lines += [
            ("args", _short(view["args"]) if view["body_note"] is None else view["body_note"]),
            ("kwargs", _short(view["kwargs"]) if view["body_note"] is None else "-"),
            ("queue", routing["queue"] or "-"),
            ("exchange", routing["exchange"] or "''"),
            ("routing key", routing["routing_key"] or "''"),
            ("priority", routing["priority"]),
            ("content", f"{view['content_type']} ({view['content_encoding']}), {view['body_bytes']} bytes"),
        ]
        headers = {k: v for k, v in view["headers"].items() if v not in (None, [], {}, [None, None])}
        lines += [(f"header {k}", _short(v)) for k, v in sorted(headers.items())]
    width = max(len(k) for k, _ in lines)
    click.echo("\n".join(f"{k.ljust(width)}  {v}" for k, v in lines))


def _short(value: Any, width: int = 200) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."
