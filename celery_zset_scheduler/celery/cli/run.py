"""``celery zset run``: a dispatcher in the foreground (the same as ``beat -S zset``)."""

from __future__ import annotations

import signal
from types import FrameType

import click

from ...dispatch.metrics import metrics_of
from ...errors import ZSetSchedulerError
from ..dispatcher.build import build_dispatcher
from .group import app_of, installation
from .options import metrics_port_option


def _shard_list(value: str | None) -> set[int] | None:
    if not value:
        return None
    try:
        return {int(part) for part in value.split(",") if part.strip()}
    except ValueError:
        raise click.BadParameter("a comma-separated list of shard numbers, e.g. 0,1,5") from None


@click.command()
@click.option("--shards", "shards", default=None, metavar="LIST",
              help="Serve only these shards (comma-separated); default: a fair share of all.")
@click.option("-l", "--loglevel", default="INFO", show_default=True, help="Logging level.")
@metrics_port_option
@click.pass_context
def run(ctx: click.Context, shards: str | None, loglevel: str, metrics_port: int | None) -> None:
    """Run a dispatcher until SIGTERM/SIGINT (it finishes its batch and releases its leases)."""
    app = app_of(ctx)
    app.log.setup(loglevel=loglevel.upper(), colorize=False)
    try:
        dispatcher = build_dispatcher(app, pinned=_shard_list(shards), metrics_port=metrics_port,
                                      metrics_option="--metrics-port")
    except ZSetSchedulerError as exc:
        raise click.ClickException(str(exc)) from None

    def stop(signum: int, frame: FrameType | None) -> None:
        dispatcher.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    click.echo(f"zset dispatcher {dispatcher.member_id} starting", err=True)
    metrics = metrics_of(dispatcher.observer)
    if metrics is not None:
        addr = installation(ctx).settings.metrics_addr
        click.echo(f"zset metrics on http://{addr}:{metrics.port}/metrics", err=True)
    try:
        dispatcher.run()
    except ZSetSchedulerError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if metrics is not None:
            metrics.close()
