"""``celery zset import-beat --from redbeat|django-celery-beat``: the same entries, here.

Reads a RedBeat store (its Redis keys, read only) or django-celery-beat's ``PeriodicTask`` table
(the app's Django project, when django-celery-beat is installed in it) and adds each entry with its
run history (last run, run count); the next run follows from the last run, so an entry overdue in
the old scheduler runs once, as that scheduler would have on its next start. What cannot be
mapped one to one is reported, with the reason, and not guessed at.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import click
import redis

from ...errors import ConfigurationError
from ...model.times import iso
from ...ops.periodic import describe
from ..core.state import broker_redis_url
from ..periodic.beat_import import ImportReport, from_django_celery_beat, from_redbeat
from ..periodic.runtime import add_many
from .group import app_of, store_of
from .options import common, compose, yes_option
from .output import ExitCode, confirm, emit_json, table


def _redbeat(app: Any, url: str | None, prefix: str | None) -> ImportReport:
    url = url or app.conf.get("redbeat_redis_url") or broker_redis_url(app)
    if not url:
        raise click.UsageError("no RedBeat Redis: pass --redbeat-url (default: redbeat_redis_url, or the broker)")
    client = redis.Redis.from_url(url)
    try:
        return from_redbeat(client, key_prefix=prefix or app.conf.get("redbeat_key_prefix") or "redbeat:")
    finally:
        client.close()


def _django() -> ImportReport:
    try:
        django = importlib.import_module("django")
        settings = importlib.import_module("django.conf").settings
    except ImportError:
        raise ConfigurationError("--from django-celery-beat needs Django and django-celery-beat installed") from None
    if not settings.configured:
        if not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise ConfigurationError("--from django-celery-beat: Django is not configured "
                                     "(set DJANGO_SETTINGS_MODULE to your project's settings)")
        django.setup()
    apps = importlib.import_module("django.apps").apps
    if not apps.is_installed("django_celery_beat"):
        raise ConfigurationError("--from django-celery-beat: django_celery_beat is not in INSTALLED_APPS")
    return from_django_celery_beat()


@click.command(name="import-beat")
@compose(common, yes_option)
@click.option("--from", "source", type=click.Choice(["redbeat", "django-celery-beat"]), required=True,
              help="Where the entries are.")
@click.option("--redbeat-url", default=None, metavar="URL", help="RedBeat's Redis (default: redbeat_redis_url).")
@click.option("--redbeat-prefix", default=None, metavar="PREFIX",
              help="RedBeat's key prefix (default: redbeat_key_prefix, or 'redbeat:').")
@click.option("--dry-run", is_flag=True, help="Only report what would be imported and what cannot be.")
@click.option("--replace", "replace_existing", is_flag=True,
              help="Replace the definition of entries that exist here already (their history here is kept).")
@click.pass_context
def import_beat(ctx: click.Context, as_json: bool, yes: bool, source: str, redbeat_url: str | None,
                redbeat_prefix: str | None, dry_run: bool, replace_existing: bool) -> None:
    """Create here the periodic entries of a RedBeat store or a django-celery-beat database."""
    app = app_of(ctx)
    store_of(ctx)
    report = _redbeat(app, redbeat_url, redbeat_prefix) if source == "redbeat" else _django()
    statuses: dict[str, str] = {}
    if dry_run:
        statuses = {entry.name: "would_import" for entry, _ in report.entries}
    elif report.entries:
        confirm(yes, f"Import {len(report.entries):,} periodic entr{'y' if len(report.entries) == 1 else 'ies'} "
                     f"from {source}?")
        statuses = add_many(app, report.entries, replace_existing=replace_existing)
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    if report.problems:
        counts["not_mappable"] = len(report.problems)
    if as_json:
        emit_json({
            "action": "import-beat", "from": source, "dry_run": dry_run,
            "results": [{"name": e.name, "status": statuses.get(e.name), "task": e.task,
                         "schedule": e.schedule, "last_run_ms": s.last_run_ms, "total_run_count": s.total_run_count}
                        for e, s in report.entries],
            "problems": [{"name": n, "reason": r} for n, r in report.problems],
            "counts": counts,
        })
    else:
        rows = [(e.name, e.task, describe(e.schedule), iso(s.last_run_ms) or "-", s.total_run_count,
                 statuses.get(e.name, "-")) for e, s in report.entries]
        if rows:
            click.echo(table(["NAME", "TASK", "SCHEDULE", "LAST RUN", "RUNS", "STATUS"], rows, right=(4,)))
        if report.problems:
            click.echo(f"\nnot mappable ({len(report.problems)}):")
            click.echo(table(["NAME", "WHY"], report.problems))
        summary = ", ".join(f"{n} {s}" for s, n in counts.items()) or "nothing to import"
        click.echo(f"import-beat: {summary}")
    ok = ("added", "updated", "unchanged", "would_import")
    if any(n and s not in ok for s, n in counts.items()):
        ctx.exit(int(ExitCode.NOT_FOUND))
