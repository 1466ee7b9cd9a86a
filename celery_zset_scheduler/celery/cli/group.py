"""The ``zset`` command group and what every subcommand shares."""

from __future__ import annotations

from typing import Any

import click

from ..installation import Installation, ensure_installation


@click.group(name="zset")
@click.pass_context
def zset(ctx: click.Context) -> None:
    """Operate celery-zset-scheduler: dispatchers, pending tasks, dead letters."""


def app_of(ctx: click.Context) -> Any:
    obj = ctx.find_root().obj
    app = getattr(obj, "app", None)
    if app is None:
        raise click.UsageError("no Celery app: run it as `celery -A proj zset ...`")
    return app


def installation(ctx: click.Context) -> Installation:
    return ensure_installation(app_of(ctx))
