"""``celery zset dlq ls|show|requeue|purge``: the dead-letter store (``ops.deadletters``)."""

from __future__ import annotations

import click

from ...model.cursors import InvalidCursor
from ...model.times import Moment, iso
from ...ops import deadletters as ops
from ...ops.deadletters import LetterFilter
from ...ops.views import letter_view
from ...store.deadletters import DeadLetters
from ...store.snapshot import redis_now_ms
from ..core.messages import decompress
from .actions import ids_argument, read_ids
from .group import ZSetGroup, installation, store_of
from .options import (
    all_option,
    common,
    compose,
    cursor_option,
    dlq_filters,
    due_ms,
    due_options,
    limit_option,
    moment_ms,
    scan_limit_option,
    text_of,
    yes_option,
)
from .output import CommandError, ExitCode, confirm, emit_json, print_results, progress, relative, results, table


@click.group(name="dlq", cls=ZSetGroup)
def dlq() -> None:
    """Dead letters: tasks that will not run again on their own (list, show, requeue, purge)."""


def _letters(ctx: click.Context) -> DeadLetters:
    store_of(ctx)  # checks the shard count
    return installation(ctx).dead_letters


def _filter(task_name: str | None, before: Moment | None, after: Moment | None) -> LetterFilter:
    return LetterFilter(task_name, newest_ms=moment_ms(before), oldest_ms=moment_ms(after))


@dlq.command(name="ls")
@compose(common, dlq_filters, limit_option, cursor_option, scan_limit_option)
@click.pass_context
def dlq_ls(
    ctx: click.Context, as_json: bool, task_name: str | None, before: Moment | None, after: Moment | None,
    limit: int, cursor: str | None, scan_limit: int,
) -> None:
    """List dead letters, newest first, a page at a time."""
    letters = _letters(ctx)
    try:
        page = ops.list_letters(letters, _filter(task_name, before, after), limit=limit, cursor=cursor,
                                scan_limit=scan_limit, bounds=[text_of(before), text_of(after)])
    except InvalidCursor as exc:
        raise click.BadParameter(str(exc), param_hint="--cursor") from None
    next_cursor = page.cursor
    if as_json:
        emit_json({"dead_letters": [letter_view(x, full=False) for x in page.letters], "cursor": next_cursor,
                   "scanned": page.scanned})
        return
    now = redis_now_ms(store_of(ctx))
    rows = [(x.task_id, x.task_name or "?", x.reason, _exception(x.exc_type, x.exc_message), x.attempts,
             relative(x.dead_lettered_ms, now)) for x in page.letters]
    if rows:
        click.echo(table(["ID", "TASK", "REASON", "EXCEPTION", "ATTEMPTS", "DEAD-LETTERED"], rows, right=(4,)))
    else:
        click.echo("no dead letters match" + (" among the entries scanned" if next_cursor else ""))
    if next_cursor:
        click.echo(f"\nmore: --cursor {next_cursor}", err=True)


@dlq.command(name="show")
@common
@click.argument("task_id")
@click.pass_context
def dlq_show(ctx: click.Context, as_json: bool, task_id: str) -> None:
    """Show a dead letter: why it died, its arguments, traceback and original message."""
    view = ops.show(_letters(ctx), task_id, decompress)
    if view is None:
        raise CommandError(f"no dead letter with id {task_id!r}", ExitCode.NOT_FOUND)
    if as_json:
        emit_json(view)
        return
    message = view["message"] or {}
    lines = [
        ("id", view["id"]), ("task", view["task"] or "?"), ("reason", view["reason"]),
        ("exception", _exception(view["exc_type"], view["exc_message"])), ("attempts", view["attempts"]),
        ("dead-lettered", view["dead_lettered"]), ("first failure", iso(view["first_failure_ms"])),
        ("last failure", iso(view["last_failure_ms"])), ("worker", view["worker"] or "-"),
        ("args", view["args"] if view["args"] is not None else message.get("args")),
        ("kwargs", view["kwargs"] if view["kwargs"] is not None else message.get("kwargs")),
        ("queue", (message.get("routing") or {}).get("queue")),
    ]
    if view["error"]:
        lines.append(("message", f"not decodable: {view['error']}"))
    width = max(len(k) for k, _ in lines)
    click.echo("\n".join(f"{k.ljust(width)}  {'-' if v is None else v}" for k, v in lines))
    if view["traceback"]:
        click.echo("\n" + view["traceback"].rstrip())


@dlq.command(name="requeue")
@compose(common, yes_option, all_option, dlq_filters, due_options)
@ids_argument
@click.pass_context
def dlq_requeue(
    ctx: click.Context, as_json: bool, yes: bool, select_all: bool, task_name: str | None,
    before: Moment | None, after: Moment | None, eta: Moment | None, countdown: float | None,
    task_ids: tuple[str, ...],
) -> None:
    """Put dead letters back in the store (attempts reset), due now or at --eta/--countdown."""
    letters, store = _letters(ctx), store_of(ctx)
    when = due_ms(eta, countdown)
    due_text = "due now" if when is None else f"due {iso(when)}"
    flt = _selection(task_ids, select_all, task_name, before, after)
    if flt is None:
        ids = read_ids(task_ids, yes)
        confirm(yes, f"Requeue {len(ids):,} dead letter(s), {due_text}?")
        with progress(len(ids), "requeueing", enabled=len(ids) > 500) as update:
            outcome = ops.requeue(store, letters, ids, due_ms=when, progress=update)
        print_results(results("requeue", dict(outcome)), as_json, ok=("requeued",))
        return
    total = ops.count_matching(letters, flt)
    confirm(yes, f"Requeue {_what(flt, total)}, {due_text}?")
    with progress(total if total is not None else letters.count(), "requeueing") as update:
        counts = ops.requeue_matching(store, letters, flt, due_ms=when, progress=update)
    print_results(results("requeue", {}, counts={str(k): n for k, n in counts.items()}), as_json, ok=("requeued",))


@dlq.command(name="purge")
@compose(common, yes_option, all_option, dlq_filters)
@ids_argument
@click.pass_context
def dlq_purge(
    ctx: click.Context, as_json: bool, yes: bool, select_all: bool, task_name: str | None,
    before: Moment | None, after: Moment | None, task_ids: tuple[str, ...],
) -> None:
    """Delete dead letters for good: by id, by filters, or --all."""
    letters = _letters(ctx)
    flt = _selection(task_ids, select_all, task_name, before, after)
    if flt is None:
        ids = read_ids(task_ids, yes)
        confirm(yes, f"Delete {len(ids):,} dead letter(s) for good?")
        print_results(results("purge", dict(ops.purge(letters, ids))), as_json, ok=("purged",))
        return
    total = ops.count_matching(letters, flt)
    confirm(yes, f"Delete {_what(flt, total)} for good?")
    with progress(total if total is not None else letters.count(), "purging") as update:
        removed = ops.purge_matching(letters, flt, progress=update)
    print_results(results("purge", {}, counts={"purged": removed}), as_json, ok=("purged",))


def _selection(
    task_ids: tuple[str, ...], select_all: bool, task_name: str | None,
    before: Moment | None, after: Moment | None,
) -> LetterFilter | None:
    """The filter of a bulk operation, or None when ids were given."""
    filtered = bool(task_name or before or after)
    if task_ids and (filtered or select_all):
        raise click.UsageError("give ids or a selection (--task, --before, --after, --all), not both")
    if not task_ids and not (filtered or select_all):
        raise click.UsageError("give dead-letter ids, a selection (--task, --before, --after), or --all")
    return _filter(task_name, before, after) if not task_ids else None


def _what(flt: LetterFilter, total: int | None) -> str:
    parts = []
    if flt.oldest_ms is not None:
        parts.append(f"since {iso(flt.oldest_ms)}")
    if flt.newest_ms is not None:
        parts.append(f"until {iso(flt.newest_ms)}")
    when = f" ({', '.join(parts)})" if parts else ""
    if flt.task_name is not None:
        return f"every dead letter of task {flt.task_name!r}{when}"
    return f"{total or 0:,} dead letter(s){when}"


def _exception(exc_type: str, message: str, width: int = 60) -> str:
    text = f"{exc_type}: {message}" if exc_type else message
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
