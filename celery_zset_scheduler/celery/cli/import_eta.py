"""``celery zset import-eta``: move the broker's native ETA backlog into the store (:mod:`..backlog`)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from ..backlog import broker_kind, import_backlog
from .group import app_of, store_of
from .options import common, compose, yes_option
from .output import CommandError, ExitCode, confirm, emit_json, number, table


class _Bar:
    """A progress bar on stderr (a terminal only), opened once the total is known."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._stack = contextlib.ExitStack()
        self._bar: Any = None

    def total(self, n: int) -> None:
        if sys.stderr.isatty() and n:
            self._bar = self._stack.enter_context(
                click.progressbar(length=n, label=self.label, file=sys.stderr, show_pos=True))

    def update(self, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        self._stack.close()


@click.command(name="import-eta")
@compose(common, yes_option)
@click.option("--queue", "queues", multiple=True, metavar="NAME",
              help="Only this queue (repeatable). Default: the app's queues and, on RabbitMQ, Celery's delay "
                   "queues (celery_delayed_<n>).")
@click.option("--dry-run", is_flag=True, help="Count what would move; change nothing.")
@click.option("--ignore-workers", is_flag=True,
              help="Do not check that no worker answers a ping (workers must be stopped all the same).")
@click.pass_context
def import_eta(ctx: click.Context, as_json: bool, yes: bool, queues: tuple[str, ...], dry_run: bool,
               ignore_workers: bool) -> None:
    """Move every native ETA message whose ETA is in the future from the broker into the store.

    Stop the workers first: a worker holds the ETA messages it fetched in its memory. The messages
    keep their id, routing and headers; the others stay in (or go back to) their queue. On a
    Redis broker the messages workers held when they died (the `unacked` hash) are imported too.
    Interrupted, it loses and duplicates nothing: run it again to finish.
    """
    app = app_of(ctx)
    store_of(ctx)  # the store's shard count matches the settings
    kind = broker_kind(app)
    if not dry_run:
        if not ignore_workers:
            answering = app.control.ping(timeout=1.0) or []
            if answering:
                names = ", ".join(sorted(name for reply in answering for name in reply))
                raise CommandError(f"workers are running ({names}): stop them first, they hold ETA messages "
                                   "in memory (or pass --ignore-workers)", ExitCode.ERROR)
        where = ", ".join(queues) if queues else "the app's queues"
        confirm(yes, f"Move every message with a future ETA from {where} ({kind} broker) into the store?")
    bar = _Bar("dry run" if dry_run else "importing")
    try:
        summaries = import_backlog(app, list(queues) or None, dry_run=dry_run, progress=bar.update, total=bar.total)
    finally:
        bar.close()
    totals = {k: sum(getattr(s, k) for s in summaries) for k in ("seen", "imported", "already", "kept", "unreadable")}
    if as_json:
        emit_json({"dry_run": dry_run, "broker": kind, "sources": [s.as_dict() for s in summaries], "totals": totals})
        return
    rows = [(s.source.replace("\x06\x16", "·"), number(s.seen), number(s.imported), number(s.already),
             number(s.kept), number(s.unreadable)) for s in summaries]
    click.echo(table(["SOURCE", "SEEN", "IMPORTED", "BEFORE", "KEPT", "UNREADABLE"], rows, right=(1, 2, 3, 4, 5)))
    verb = "would move" if dry_run else "moved"
    click.echo(f"{verb} {number(totals['imported'])} task(s) into the store; {number(totals['kept'])} kept in the "
               f"broker (no ETA in the future), {number(totals['already'])} imported by an earlier run")
