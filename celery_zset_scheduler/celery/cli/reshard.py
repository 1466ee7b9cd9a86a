"""``celery zset reshard --to N``: change the store's shard count online (:mod:`...ops.reshard`)."""

from __future__ import annotations

from typing import Any

import click

from ...ops.reshard import MOST_SHARDS, Report, plan, read_layout, reshard
from .group import installation, store_of
from .options import common, compose, yes_option
from .output import confirm, emit_json, number, table


def report_json(report: Report) -> dict[str, Any]:
    return {
        "dry_run": report.dry_run,
        "shards_from": report.shards_from,
        "shards_to": report.shards_to,
        "resumed": report.resumed,
        "passes": report.passes,
        "moved": report.moved,
        "shards": [
            {
                "shard": m.shard,
                "kept": m.entries.kept,
                "moving": m.entries.moving,
                "to": {str(t): n for t, n in sorted(m.entries.out.items())},
                "inflight": m.inflight,
                "periodic_moving": m.periodic.moving,
                "revokes_moving": m.revokes.moving,
            }
            for m in report.shards
        ],
    }


def _targets(out: dict[int, int]) -> str:
    return ", ".join(f"{t}:{number(n)}" for t, n in sorted(out.items())) or "-"


@click.command(name="reshard")
@compose(common, yes_option)
@click.option("--to", "to", type=click.IntRange(1, MOST_SHARDS), required=True, metavar="N",
              help="The new shard count.")
@click.option("--dry-run", is_flag=True, help="Count what would move from each shard to each new one; change nothing.")
@click.option("--batch", type=click.IntRange(1, 5000), default=None, metavar="N",
              help="Entries moved per script call (default: zset_scheduler_batch_size).")
@click.pass_context
def reshard_command(ctx: click.Context, as_json: bool, yes: bool, to: int, dry_run: bool, batch: int | None) -> None:
    """Change the store's shard count to N while producers and dispatchers keep running.

    Entries, periodic entries, idempotency-key bookkeeping and revoke records move to the shard
    their key hashes to under N; nothing is lost, run twice or run early. Running producers and
    dispatchers follow the move (dispatchers deal the new shards between them within a heartbeat);
    once it has ended, a process started with the old zset_scheduler_shards refuses to start: set
    it to N. Interrupted (even by kill -9), run the same command again: it resumes.
    """
    store = store_of(ctx)
    size = batch or installation(ctx).settings.batch_size
    if dry_run:
        _print(plan(store, to, batch=size), as_json)
        return
    layout = read_layout(store)
    if layout.moving_to == to:
        question = f"Resume the reshard from {layout.shards} to {to} shards?"
    else:
        question = f"Reshard the store from {layout.shards} to {to} shards now?"
    confirm(yes, question)

    def progress(event: str, **fields: Any) -> None:
        words = " ".join(f"{k}={v}" for k, v in fields.items())
        click.echo(f"reshard {event} {words}".rstrip(), err=True)

    _print(reshard(store, to, batch=size, progress=progress), as_json)
    if not as_json:
        click.echo(f"Set zset_scheduler_shards={to} in every process's configuration before its next start "
                   "(a process started with the old count refuses to start).", err=True)


def _print(report: Report, as_json: bool) -> None:
    if as_json:
        emit_json(report_json(report))
        return
    rows = [(m.shard, number(m.entries.kept) if report.dry_run else "-", number(m.entries.moving),
             _targets(m.entries.out), number(m.periodic.moving), number(m.revokes.moving),
             number(m.inflight) if report.dry_run else "-")
            for m in report.shards]
    click.echo(table(["SHARD", "KEPT", "MOVING", "TO (SHARD:ENTRIES)", "PERIODIC", "REVOKES", "IN FLIGHT"], rows,
                     right=(0, 1, 2, 4, 5, 6)))
    moving = sum(m.entries.moving for m in report.shards)
    periodic = sum(m.periodic.moving for m in report.shards)
    verb = "would move" if report.dry_run else "moved"
    click.echo(f"{report.shards_from} -> {report.shards_to} shards: {verb} {number(moving)} entries, "
               f"{number(periodic)} periodic entries"
               + ("" if report.dry_run else f" in {report.passes} passes"))
