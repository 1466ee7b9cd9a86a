"""``celery zset cancel``, ``reschedule`` and ``run-now``: acting on pending tasks.

Ids come as arguments, or one per line from stdin with ``-``. ``cancel`` also takes a selection
instead (``--task``, ``--due-before``, ``--due-after``, ``--shard``, or ``--all``), which it walks
a page at a time with a progress bar.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ...describe import iso
from ...listing import Listed, sweep_pending
from ...status import redis_ms
from ...store import CHUNK, Store
from .group import app_of, store_of
from .options import (
    Moment,
    all_option,
    common,
    compose,
    due_ms,
    due_options,
    moment_ms,
    pending_filters,
    yes_option,
)
from .output import confirm, print_results, progress, results

ids_argument = click.argument("task_ids", nargs=-1, metavar="ID... | -")


def read_ids(task_ids: Sequence[str], yes: bool) -> list[str]:
    """The ids given, with ``-`` replaced by the lines of stdin."""
    if "-" not in task_ids:
        return list(dict.fromkeys(task_ids))
    if not yes:
        raise click.UsageError("reading ids from stdin (-) needs --yes: the question would read stdin too")
    ids = [i for i in task_ids if i != "-"]
    ids += [line.strip() for line in sys.stdin if line.strip()]
    return list(dict.fromkeys(ids))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


@click.command()
@compose(common, yes_option, all_option, pending_filters)
@ids_argument
@click.pass_context
def cancel(
    ctx: click.Context, as_json: bool, yes: bool, select_all: bool, task_name: str | None,
    due_before: Moment | None, due_after: Moment | None, shards: tuple[int, ...], task_ids: tuple[str, ...],
) -> None:
    """Cancel pending tasks by id, or every pending task a selection matches."""
    app, store = app_of(ctx), store_of(ctx)
    filtered = bool(task_name or due_before or due_after or shards)
    if task_ids and (filtered or select_all):
        raise click.UsageError("give task ids or a selection (--task, --due-before, --due-after, --shard, --all), "
                               "not both")
    if not task_ids and not (filtered or select_all):
        raise click.UsageError("give task ids, a selection (--task, --due-before, --due-after, --shard), or --all")
    if task_ids:
        ids = read_ids(task_ids, yes)
        confirm(yes, f"Cancel {_plural(len(ids), 'pending task')}?")
        outcome: dict[str, str] = {}
        with progress(len(ids), "cancelling", enabled=len(ids) > CHUNK) as update:
            for start in range(0, len(ids), CHUNK):
                chunk = ids[start:start + CHUNK]
                outcome.update(store.cancel(chunk))
                update(len(chunk))
        print_results(results("cancel", outcome), as_json, ok=("cancelled",))
        return
    wanted = sorted(set(shards)) or list(range(store.shards))
    if wanted[-1] >= store.shards:
        raise click.BadParameter(f"the store has shards 0..{store.shards - 1}", param_hint="--shard")
    low, high = moment_ms(app, due_after), moment_ms(app, due_before)
    total = _count(store, wanted, low, high)
    what = (f"every pending task named {task_name!r} among {_plural(total, 'pending task')}" if task_name
            else _plural(total, "pending task"))
    confirm(yes, f"Cancel {what}{_selection(app, due_before, due_after, shards)}?")
    counts: dict[str, int] = {}

    def act(items: list[Listed]) -> list[str]:
        for status in store.cancel([i.task_id for i in items]).values():
            counts[status] = counts.get(status, 0) + 1
        return [i.task_id for i in items]  # cancelled, or claimed meanwhile: gone from due either way

    with progress(total, "cancelling") as update:
        for read, _ in sweep_pending(store, act, shards=wanted, min_due=low, max_due=high, task_name=task_name):
            update(read)
    print_results(results("cancel", {}, counts=counts), as_json, ok=("cancelled",))


@click.command()
@compose(common, yes_option, due_options)
@ids_argument
@click.pass_context
def reschedule(
    ctx: click.Context, as_json: bool, yes: bool, eta: Moment | None, countdown: float | None,
    task_ids: tuple[str, ...],
) -> None:
    """Move pending tasks to another due time (--eta or --countdown)."""
    app, store = app_of(ctx), store_of(ctx)
    when = due_ms(app, eta, countdown)
    if when is None:
        raise click.UsageError("give the new due time with --eta TIME or --countdown SECONDS")
    if not task_ids:
        raise click.UsageError("give the id of at least one pending task")
    ids = read_ids(task_ids, yes)
    confirm(yes, f"Reschedule {_plural(len(ids), 'task')} to {iso(when)}?")
    _move(store, ids, when, "reschedule", as_json)


@click.command(name="run-now")
@compose(common, yes_option)
@ids_argument
@click.pass_context
def run_now(ctx: click.Context, as_json: bool, yes: bool, task_ids: tuple[str, ...]) -> None:
    """Make pending tasks due now (by Redis time): the dispatcher sends them at once."""
    store = store_of(ctx)
    if not task_ids:
        raise click.UsageError("give the id of at least one pending task")
    ids = read_ids(task_ids, yes)
    confirm(yes, f"Run {_plural(len(ids), 'task')} now?")
    _move(store, ids, redis_ms(store.client.time()), "run-now", as_json)


def _move(store: Store, ids: list[str], when: int, action: str, as_json: bool) -> None:
    outcome: dict[str, str] = {}
    with progress(len(ids), action, enabled=len(ids) > CHUNK) as update:
        for task_id in ids:
            outcome[task_id] = "rescheduled" if store.reschedule(task_id, when) else "not_pending"
            update(1)
    extra = {i: {"due_ms": when, "due": iso(when)} for i, s in outcome.items() if s == "rescheduled"}
    print_results(results(action, outcome, extra), as_json, ok=("rescheduled",))


def _count(store: Store, shards: list[int], low: int | None, high: int | None) -> int:
    """Pending entries in a due range over ``shards``: ZCOUNT is O(log n) per shard."""
    pipe = store.client.pipeline(transaction=False)
    for shard in shards:
        pipe.zcount(store.keys.shard(shard).due, "-inf" if low is None else low, "+inf" if high is None else high)
    return sum(int(n) for n in pipe.execute())


def _selection(app: object, before: Moment | None, after: Moment | None, shards: tuple[int, ...]) -> str:
    parts = []
    if after is not None:
        parts.append(f"due at or after {iso(after.ms(app))}")
    if before is not None:
        parts.append(f"due at or before {iso(before.ms(app))}")
    if shards:
        parts.append(f"in shard {','.join(map(str, sorted(set(shards))))}")
    return f" ({'; '.join(parts)})" if parts else ""

