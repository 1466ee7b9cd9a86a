"""The ``zset`` command group and what every subcommand shares."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ...errors import ConfigurationError
from ...store.pending import Store
from ..core.state import Installation, ensure_installation
from .options import VERBOSE
from .output import CommandError, ExitCode, one_line


class ZSetGroup(click.Group):
    """Turns any error of a subcommand into one ``Error: ...`` line (a traceback with --verbose)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.Abort, click.exceptions.Exit):
            raise
        except BrokenPipeError:  # `celery zset docs | head`: the reader has seen enough
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush
            return None
        except Exception as exc:
            if ctx.meta.get(VERBOSE):
                raise
            raise CommandError(one_line(exc, _url(ctx)), ExitCode.ERROR) from None


@click.group(name="zset", cls=ZSetGroup)
@click.pass_context
def zset(ctx: click.Context) -> None:
    """Operate celery-zset-scheduler: dispatchers, pending tasks, dead letters, periodic entries.

    TIME values (--eta, --due-before, --before...) are ISO 8601 date-times (naive ones as
    UTC, as a Celery worker reads a naive eta), 'now', or offsets from now: +10m, -2h, 1d12h.
    Every command takes --json for scripts (schemas and exit codes: `celery zset docs`).
    """


def app_of(ctx: click.Context) -> Any:
    obj = ctx.find_root().obj
    app = getattr(obj, "app", None)
    if app is None:
        raise click.UsageError("no Celery app: run it as `celery -A proj zset ...`")
    return app


def installation(ctx: click.Context) -> Installation:
    return ensure_installation(app_of(ctx))


def store_of(ctx: click.Context) -> Store:
    """The app's store, after checking (read-only) that its shard count matches the settings."""
    store = installation(ctx).store
    store.verify_meta()
    return store


def _url(ctx: click.Context) -> str | None:
    try:
        return installation(ctx).settings.url
    except (ConfigurationError, click.UsageError):
        return None
