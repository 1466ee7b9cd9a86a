"""Every option the ``celery zset`` commands share, defined once (and reusable by other CLIs).

Times (``--eta``, ``--due-before``, ``--before``...) are parsed by :mod:`...model.times`: an ISO 8601
date-time (naive ones are read as UTC, as a Celery worker reads a naive ``eta``), ``now``, or an
offset from now: ``+10m``, ``-2h``, ``30s``, ``1d12h``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ...model.times import Moment, countdown_ms, parse_moment

F = TypeVar("F", bound=Callable[..., Any])

VERBOSE = "zset_verbose"


class MomentType(click.ParamType):  # type: ignore[type-arg]
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Moment:
        if isinstance(value, Moment):
            return value
        try:
            return parse_moment(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIME = MomentType()


def compose(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Several option decorators as one, applied in the order listed (top to bottom in --help)."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def _set_verbose(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[VERBOSE] = True


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON for scripts (schemas: `celery zset docs`) instead of a table.")
yes_option = click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
verbose_option = click.option("-v", "--verbose", is_flag=True, expose_value=False, is_eager=True,
                              callback=_set_verbose, help="Show the traceback of an error.")
limit_option = click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True,
                            help="Most entries on one page.")
cursor_option = click.option("--cursor", default=None, metavar="CURSOR",
                             help="Resume after the previous page (the cursor it printed; same filters).")
scan_limit_option = click.option("--scan-limit", type=click.IntRange(1, 1_000_000), default=10_000,
                                 show_default=True,
                                 help="With --task: most entries read per page before returning a cursor.")
task_option = click.option("--task", "task_name", default=None, metavar="NAME", help="Only tasks of this name.")
due_before_option = click.option("--due-before", type=TIME, default=None, help="Only tasks due at or before TIME.")
due_after_option = click.option("--due-after", type=TIME, default=None, help="Only tasks due at or after TIME.")
shard_option = click.option("--shard", "shards", type=click.IntRange(0), multiple=True,
                            help="Only this shard (repeat for several).")
before_option = click.option("--before", type=TIME, default=None, help="Only entries dead-lettered at or before TIME.")
after_option = click.option("--after", type=TIME, default=None, help="Only entries dead-lettered at or after TIME.")
all_option = click.option("--all", "select_all", is_flag=True,
                          help="Select every entry (narrowed by any filters given).")
eta_option = click.option("--eta", type=TIME, default=None, help="Due at this TIME.")
countdown_option = click.option("--countdown", type=click.FloatRange(0), default=None, metavar="SECONDS",
                                help="Due this many seconds from now.")
watch_option = click.option("--watch", is_flag=True, help="Refresh in place until interrupted.")
interval_option = click.option("--interval", type=click.FloatRange(0.1), default=2.0, show_default=True,
                               metavar="SECONDS", help="Seconds between refreshes with --watch.")
count_option = click.option("--count", type=click.IntRange(0), default=0, metavar="N",
                            help="With --watch: stop after N refreshes (0: never).")
metrics_port_option = click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
                                   help="Serve Prometheus metrics on this port (0: any free port); "
                                        "default: zset_scheduler_metrics_port.")

common = compose(json_option, verbose_option)
pending_filters = compose(task_option, due_before_option, due_after_option, shard_option)
dlq_filters = compose(task_option, before_option, after_option)
due_options = compose(eta_option, countdown_option)


def due_ms(eta: Moment | None, countdown: float | None) -> int | None:
    """The due time chosen by ``--eta``/``--countdown`` (at most one of them)."""
    if eta is not None and countdown is not None:
        raise click.UsageError("give --eta or --countdown, not both")
    if eta is not None:
        return eta.ms()
    if countdown is not None:
        return countdown_ms(countdown)
    return None


def moment_ms(moment: Moment | None) -> int | None:
    return None if moment is None else moment.ms()


def text_of(moment: Moment | None) -> str | None:
    """A time as typed, which binds a cursor to the filter rather than to one instant."""
    return None if moment is None else moment.text
