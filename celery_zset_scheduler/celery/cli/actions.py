"""``celery zset cancel``, ``reschedule`` and ``run-now``: acting on pending tasks (``ops.pending``).

Ids come as arguments, or one per line from stdin with ``-``. ``cancel`` also takes a selection
instead (``--task``, ``--due-before``, ``--due-after``, ``--shard``, or ``--all``), which it walks
a page at a time with a progress bar.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import click

from ...model.times import Moment, iso
from ...ops import pending as ops
from ...store.pending import CHUNK
from .group import store_of
from .options import all_option, common, compose, due_ms, due_options, moment_ms, pending_filters, yes_option
from .output import confirm, number, print_results, progress, results

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
    return f"{number(n)} {word}{'' if n == 1 else 's'}"


@click.command()
@compose(common, yes_option, all_option, pending_filters)
@ids_argument
@click.pass_context
def cancel(
    ctx: click.Context, as_json: bool, yes: bool, select_all: bool, task_name: str | None,
    due_before: Moment | None, due_after: Moment | None, shards: tuple[int, ...], task_ids: tuple[str, ...],
) -> None:
    """Cancel pending tasks by id, or every pending task a selection matches."""
    store = store_of(ctx)
    filtered = bool(task_name or due_before or due_after or shards)
    if task_ids and (filtered or select_all):
        raise click.UsageError("give task ids or a selection (--task, --due-before, --due-after, --shard, --all), "
                               "not both")
    if not task_ids and not (filtered or select_all):
        raise click.UsageError("give task ids, a selection (--task, --due-before, --due-after, --shard), or --all")
    if task_ids:
        ids = read_ids(task_ids, yes)
        confirm(yes, f"Cancel {_plural(len(ids), 'pending task')}?")
        with progress(len(ids), "cancelling", enabled=len(ids) > CHUNK) as update:
            outcome: Mapping[str, str] = ops.cancel(store, ids, update)
        print_results(results("cancel", outcome), as_json, ok=("cancelled",))
        return
    selection = ops.Selection(shards or None, moment_ms(due_after), moment_ms(due_before), task_name)
    try:
        total = ops.count_selected(store, selection)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--shard") from None
    what = (f"every pending task named {task_name!r} among {_plural(total, 'pending task')}" if task_name
            else _plural(total, "pending task"))
    confirm(yes, f"Cancel {what}{_selection(due_before, due_after, shards)}?")
    with progress(total, "cancelling") as update:
        counts = ops.cancel_selected(store, selection, update)
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
    store = store_of(ctx)
    when = due_ms(eta, countdown)
    if when is None:
        raise click.UsageError("give the new due time with --eta TIME or --countdown SECONDS")
    if not task_ids:
        raise click.UsageError("give the id of at least one pending task")
    ids = read_ids(task_ids, yes)
    confirm(yes, f"Reschedule {_plural(len(ids), 'task')} to {iso(when)}?")
    with progress(len(ids), "reschedule", enabled=len(ids) > CHUNK) as update:
        outcome = ops.reschedule(store, ids, when, update)
    _print_moved("reschedule", outcome, when, as_json)


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
    with progress(len(ids), "run-now", enabled=len(ids) > CHUNK) as update:
        when, outcome = ops.run_now(store, ids, update)
    _print_moved("run-now", outcome, when, as_json)


def _print_moved(action: str, outcome: Mapping[str, str], when: int, as_json: bool) -> None:
    extra = {i: {"due_ms": when, "due": iso(when)} for i, s in outcome.items() if s == "rescheduled"}
    print_results(results(action, outcome, extra), as_json, ok=("rescheduled",))


def _selection(before: Moment | None, after: Moment | None, shards: tuple[int, ...]) -> str:
    parts = []
    if after is not None:
        parts.append(f"due at or after {iso(after.ms())}")
    if before is not None:
        parts.append(f"due at or before {iso(before.ms())}")
    if shards:
        parts.append(f"in shard {','.join(map(str, sorted(set(shards))))}")
    return f" ({'; '.join(parts)})" if parts else ""
