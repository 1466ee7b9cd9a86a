"""``celery zset bench``: the benchmark against the app's own Redis (store and broker)."""

from __future__ import annotations

import json
import time

import click

from ...model.urls import mask_url
from .group import app_of, installation
from .options import common, yes_option
from .output import confirm, emit_json


@click.command()
@click.option("--size", type=click.IntRange(1_000, 10_000_000), default=100_000, show_default=True,
              help="Pending tasks for the bytes and lateness figures (scheduled in bulk).")
@click.option("--stream-seconds", type=click.FloatRange(1.0, 600.0), default=20.0, show_default=True,
              help="Length of the steady 1,000 due tasks/s stream the lateness is measured on.")
@click.option("--periodic", type=click.IntRange(0, 1_000_000), default=0, show_default=True, metavar="N",
              help="Also write N periodic entries and time them firing in the same minute (waits for it).")
@yes_option
@common
@click.pass_context
def bench(ctx: click.Context, size: int, stream_seconds: float, periodic: int, yes: bool, as_json: bool) -> None:
    """Measure scheduling and dispatch rates, bytes per task and lateness, next to plain Celery.

    It runs on the app's Redis under a key prefix and a queue of its own (random names, deleted
    afterwards), so no worker of yours consumes its tasks; it does load that Redis while it runs.
    """
    try:  # the benchmark lives in the repository's bench/, not in the installed package
        from bench.lib import Options, format_report, run_benchmark
    except ImportError:
        raise click.ClickException(
            "the benchmark is not installed: run this from a clone of celery-zset-scheduler "
            "(its bench/ folder must be importable), e.g. `python -m bench --store-url URL`"
        ) from None
    app = app_of(ctx)
    url = mask_url(str(installation(ctx).settings.url))
    confirm(yes, f"Write up to {size:,} benchmark tasks to {url} (deleted afterwards) and load it for a minute?")
    options = Options(size=size, calls=min(5_000, size), dispatch=min(100_000, size), raw=min(100_000, size),
                      stream_seconds=stream_seconds, periodic=periodic)
    started = time.monotonic()

    def say(text: str) -> None:
        click.echo(f"[{time.monotonic() - started:6.1f}s] {text}", err=True)

    report = run_benchmark(app, options, progress=say)
    if as_json:
        emit_json(json.loads(report.to_json()))
    else:
        click.echo(format_report(report))
