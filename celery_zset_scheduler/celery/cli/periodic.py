"""``celery zset periodic ls|show|add|rm|enable|disable|pause|resume|run-now|backfill``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from ...model.cursors import InvalidCursor
from ...model.periodic import CATCHUP_POLICIES, OVERLAP_POLICIES, SOLAR_EVENTS, PeriodicEntry, ms_to_iso
from ...model.times import Moment, iso
from ...ops.periodic import describe, entry_view, status_of
from ...store.snapshot import redis_now_ms
from ..periodic import runtime as api
from .group import ZSetGroup, app_of, store_of
from .options import TIME, common, compose, cursor_option, limit_option, yes_option
from .output import CommandError, ExitCode, confirm, emit_json, print_results, relative, results, table

names_argument = click.argument("names", nargs=-1, required=True, metavar="NAME...")


@click.group(name="periodic", cls=ZSetGroup)
def periodic() -> None:
    """Periodic entries: list, show, add, remove, enable, disable, pause, resume, run now, backfill.

    Entries live in the store, on the shard of their name; running dispatchers pick up every change
    at once. beat_schedule entries are synced into it when a dispatcher starts.
    """


@periodic.command(name="ls")
@compose(common, limit_option, cursor_option)
@click.pass_context
def periodic_ls(ctx: click.Context, as_json: bool, limit: int, cursor: str | None) -> None:
    """List periodic entries by name, a page at a time."""
    store = store_of(ctx)
    try:
        page = api.list_entries(app_of(ctx), limit=limit, cursor=cursor)
    except InvalidCursor as exc:
        raise click.BadParameter(str(exc), param_hint="--cursor") from None
    if as_json:
        emit_json({"entries": [entry_view(i.entry, i.state, i.shard, i.from_config) for i in page.entries],
                   "cursor": page.cursor})
        return
    now = redis_now_ms(store)
    rows = [(i.entry.name, i.entry.task, describe(i.entry.schedule), status_of(i.entry, i.state),
             relative(i.state.next_run_ms, now), relative(i.state.last_run_ms, now), i.state.total_run_count,
             "beat_schedule" if i.from_config else "runtime") for i in page.entries]
    if rows:
        click.echo(table(["NAME", "TASK", "SCHEDULE", "STATUS", "NEXT RUN", "LAST RUN", "RUNS", "SOURCE"], rows,
                         right=(6,)))
    else:
        click.echo("no periodic entries")
    if page.cursor:
        click.echo(f"\nmore: --cursor {page.cursor}", err=True)


@periodic.command(name="show")
@common
@click.argument("name")
@click.pass_context
def periodic_show(ctx: click.Context, as_json: bool, name: str) -> None:
    """Show a periodic entry: its definition, state, shard and the message of its occurrences."""
    store_of(ctx)
    info = api.get(app_of(ctx), name)
    if info is None:
        raise CommandError(f"no periodic entry named {name!r}", ExitCode.NOT_FOUND)
    view = entry_view(info.entry, info.state, info.shard, info.from_config)
    message = info.message
    view["next_look_ms"] = info.look_ms
    view["routing"] = None if message is None else {
        "exchange": message.exchange, "routing_key": message.routing_key, "queue": message.queue,
        "priority": message.properties.get("priority"),
    }
    if as_json:
        emit_json(view)
        return
    skip = {"schedule", "next_run_ms", "last_run_ms", "buffered_ms", "schedule_text", "routing"}
    lines = [("schedule", view["schedule_text"])] + [(k, v) for k, v in view.items() if k not in skip]
    if view["routing"]:
        lines.append(("routing", " ".join(f"{k}={v}" for k, v in view["routing"].items() if v not in (None, ""))))
    width = max(len(k) for k, _ in lines)
    click.echo("\n".join(f"{k.ljust(width)}  {_text(v)}" for k, v in lines))


def _text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _json_option(name: str, kind: type, what: str) -> Any:
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            decoded = json.loads(value)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}") from None
        if not isinstance(decoded, kind):
            raise click.BadParameter(f"must be a JSON {what}")
        return decoded

    return click.option(name, default=None, metavar="JSON", callback=parse, help=f"A JSON {what}.")


def _spec(every: float | None, cron: str | None, timezone: str | None, solar: str | None,
          lat: float | None, lon: float | None, at: Moment | None, relative: bool) -> dict[str, Any]:
    given = [x for x in (every, cron, solar, at) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one schedule: --every, --cron, --solar or --at")
    if every is not None:
        return {"type": "interval", "every": every, "relative": relative}
    if cron is not None:
        parts = cron.split()
        if len(parts) != 5:
            raise click.BadParameter("five fields: minute hour day-of-month month day-of-week", param_hint="--cron")
        minute, hour, dom, month, dow = parts
        return {"type": "crontab", "minute": minute, "hour": hour, "day_of_month": dom, "month_of_year": month,
                "day_of_week": dow, "timezone": timezone}
    if solar is not None:
        if lat is None or lon is None:
            raise click.UsageError("--solar needs --lat and --lon")
        return {"type": "solar", "event": solar, "latitude": lat, "longitude": lon}
    assert at is not None
    return {"type": "clocked", "at": ms_to_iso(at.ms())}


def _when(moment: Moment | None) -> str | None:
    return None if moment is None else ms_to_iso(moment.ms())


@periodic.command(name="add")
@compose(common, yes_option)
@click.argument("name")
@click.argument("task")
@click.option("--every", type=click.FloatRange(0.001), default=None, metavar="SECONDS", help="An interval.")
@click.option("--cron", default=None, metavar="'M H DOM MON DOW'", help="A crontab, in cron's field order.")
@click.option("--timezone", default=None, metavar="ZONE", help="The crontab's IANA zone (default: the app's).")
@click.option("--solar", type=click.Choice(SOLAR_EVENTS), default=None, help="A solar event (needs ephem).")
@click.option("--lat", type=click.FloatRange(-90, 90), default=None, help="Latitude of --solar.")
@click.option("--lon", type=click.FloatRange(-180, 180), default=None, help="Longitude of --solar.")
@click.option("--at", type=TIME, default=None, help="Once, at TIME (a clocked entry).")
@click.option("--relative", is_flag=True, help="--every rounded to its unit, as Celery's relative schedule.")
@_json_option("--args", list, "list of arguments")
@_json_option("--kwargs", dict, "object of keyword arguments")
@_json_option("--headers", dict, "object of message headers")
@_json_option("--options", dict, "object of other apply_async options")
@click.option("--queue", default=None)
@click.option("--exchange", default=None)
@click.option("--routing-key", default=None)
@click.option("--priority", type=click.IntRange(0, 255), default=None)
@click.option("--expires", type=TIME, default=None, help="No occurrence at or after TIME; the message's expires.")
@click.option("--expire-seconds", type=click.FloatRange(0), default=None, help="Each message expires this long "
              "after it is due.")
@click.option("--one-off", is_flag=True, help="Run once, then never again.")
@click.option("--start-time", type=TIME, default=None, help="No occurrence before TIME.")
@click.option("--end-time", type=TIME, default=None, help="No occurrence after TIME.")
@click.option("--disabled", is_flag=True, help="Add it disabled.")
@click.option("--description", default="")
@click.option("--catchup", type=click.Choice(CATCHUP_POLICIES), default="once", show_default=True,
              help="Occurrences missed while no dispatcher ran.")
@click.option("--catchup-window", type=click.FloatRange(0, min_open=True), default=None, metavar="SECONDS",
              help="Catch up nothing older than this.")
@click.option("--overlap", type=click.Choice(OVERLAP_POLICIES), default="allow", show_default=True,
              help="While the previous occurrence is pending or running.")
@click.option("--jitter", type=click.FloatRange(0), default=0.0, metavar="SECONDS",
              help="Each occurrence is due up to this much after its fire time (the same on every host).")
@click.option("--replace", "replace_existing", is_flag=True, help="Replace an entry of that name (its run "
              "history is kept).")
@click.pass_context
def periodic_add(ctx: click.Context, as_json: bool, yes: bool, name: str, task: str, every: float | None,
                 cron: str | None, timezone: str | None, solar: str | None, lat: float | None, lon: float | None,
                 at: Moment | None, relative: bool, args: list[Any] | None, kwargs: dict[str, Any] | None,
                 headers: dict[str, Any] | None, options: dict[str, Any] | None, queue: str | None,
                 exchange: str | None, routing_key: str | None, priority: int | None, expires: Moment | None,
                 expire_seconds: float | None, one_off: bool, start_time: Moment | None, end_time: Moment | None,
                 disabled: bool, description: str, catchup: Any, catchup_window: float | None, overlap: Any,
                 jitter: float, replace_existing: bool) -> None:
    """Add a periodic entry NAME that runs TASK (by name) on a schedule."""
    store_of(ctx)
    entry = PeriodicEntry(
        name=name, task=task, schedule=_spec(every, cron, timezone, solar, lat, lon, at, relative),
        args=args or [], kwargs=kwargs or {}, headers=headers or {}, options=options or {}, queue=queue,
        exchange=exchange, routing_key=routing_key, priority=priority, expires=_when(expires),
        expire_seconds=expire_seconds, one_off=one_off, start_time=_when(start_time), end_time=_when(end_time),
        enabled=not disabled, description=description, catchup=catchup, catchup_window=catchup_window,
        overlap=overlap, jitter=jitter,
    )
    confirm(yes, f"{'Add or replace' if replace_existing else 'Add'} periodic entry {name!r} "
                 f"({task}, {describe(entry.schedule)})?")
    app = app_of(ctx)
    status = api.add_many(app, [entry], replace_existing=replace_existing)[name]
    if status == "exists":
        raise CommandError(f"a periodic entry named {name!r} exists (--replace replaces it)", ExitCode.NOT_FOUND)
    info = api.get(app, name)
    if as_json:
        emit_json({"action": "add", "status": status,
                   "entry": None if info is None else entry_view(info.entry, info.state, info.shard, info.from_config)})
        return
    next_run = iso(info.state.next_run_ms) if info is not None else None
    click.echo(f"{status}: {name} ({describe(entry.schedule)}), next run {next_run or '-'}")


def _act(ctx: click.Context, action: str, names: Sequence[str], yes: bool, as_json: bool, question: str,
         run: Any, ok: str) -> None:
    store_of(ctx)
    unique = list(dict.fromkeys(names))
    confirm(yes, question.format(n=len(unique), s="y" if len(unique) == 1 else "ies"))
    outcome = run(app_of(ctx), *unique)
    print_results(results(action, outcome), as_json, ok=(ok, "unchanged"))


@periodic.command(name="rm")
@compose(common, yes_option)
@names_argument
@click.pass_context
def periodic_rm(ctx: click.Context, as_json: bool, yes: bool, names: tuple[str, ...]) -> None:
    """Remove periodic entries (occurrences already stored still run)."""
    _act(ctx, "remove", names, yes, as_json, "Remove {n} periodic entr{s}?", api.remove, "removed")


@periodic.command(name="enable")
@compose(common, yes_option)
@names_argument
@click.pass_context
def periodic_enable(ctx: click.Context, as_json: bool, yes: bool, names: tuple[str, ...]) -> None:
    """Enable periodic entries: each runs next at its first fire time after now."""
    _act(ctx, "enable", names, yes, as_json, "Enable {n} periodic entr{s}?", api.enable, "enabled")


@periodic.command(name="disable")
@compose(common, yes_option)
@names_argument
@click.pass_context
def periodic_disable(ctx: click.Context, as_json: bool, yes: bool, names: tuple[str, ...]) -> None:
    """Disable periodic entries: nothing runs, and nothing missed meanwhile is caught up."""
    _act(ctx, "disable", names, yes, as_json, "Disable {n} periodic entr{s}?", api.disable, "disabled")


@periodic.command(name="pause")
@compose(common, yes_option)
@click.option("--note", default="", help="Why (shown by ls/show until resumed).")
@names_argument
@click.pass_context
def periodic_pause(ctx: click.Context, as_json: bool, yes: bool, note: str, names: tuple[str, ...]) -> None:
    """Pause periodic entries: nothing runs; resume catches up by each entry's policy."""
    _act(ctx, "pause", names, yes, as_json, "Pause {n} periodic entr{s}?",
         lambda app, *n: api.pause(app, *n, note=note), "paused")


@periodic.command(name="resume")
@compose(common, yes_option)
@names_argument
@click.pass_context
def periodic_resume(ctx: click.Context, as_json: bool, yes: bool, names: tuple[str, ...]) -> None:
    """Resume paused periodic entries (missed occurrences follow each entry's catch-up policy)."""
    _act(ctx, "resume", names, yes, as_json, "Resume {n} periodic entr{s}?", api.resume, "resumed")


@periodic.command(name="run-now")
@compose(common, yes_option)
@names_argument
@click.pass_context
def periodic_run_now(ctx: click.Context, as_json: bool, yes: bool, names: tuple[str, ...]) -> None:
    """Run periodic entries once now (their schedule is not moved)."""
    store_of(ctx)
    unique = list(dict.fromkeys(names))
    confirm(yes, f"Run {len(unique)} periodic entr{'y' if len(unique) == 1 else 'ies'} now?")
    ids = api.run_now(app_of(ctx), *unique)
    outcome = {n: "triggered" if t else "unknown" for n, t in ids.items()}
    extra = {n: {"task_id": t} for n, t in ids.items() if t}
    data = results("run-now", outcome, extra)
    if not as_json:
        for n, t in ids.items():
            if t:
                click.echo(f"{n}: task {t}")
    print_results(data, as_json, ok=("triggered",))


@periodic.command(name="backfill")
@compose(common, yes_option)
@click.argument("name")
@click.option("--start", type=TIME, required=True, help="From TIME (included).")
@click.option("--end", type=TIME, required=True, help="To TIME (included, not in the future).")
@click.pass_context
def periodic_backfill(ctx: click.Context, as_json: bool, yes: bool, name: str, start: Moment, end: Moment) -> None:
    """Run every occurrence of NAME whose fire time is in a past range, now, in order."""
    store_of(ctx)
    app = app_of(ctx)
    start_ms, end_ms = start.ms(), end.ms()
    if api.get(app, name) is None:
        raise CommandError(f"no periodic entry named {name!r}", ExitCode.NOT_FOUND)
    times = api.backfill_preview(app, name, start_ms, end_ms)
    confirm(yes, f"Store {len(times):,} occurrence(s) of {name!r} fired from {iso(start_ms)} to {iso(end_ms)}, "
                 "due now?")
    ids = api.backfill(app, name, start_ms, end_ms)
    if as_json:
        emit_json({"action": "backfill", "name": name, "count": len(ids),
                   "occurrences": [{"fire_ms": t, "fire": iso(t), "task_id": i} for t, i in ids]})
        return
    click.echo(f"backfill: {len(ids):,} occurrence(s) of {name} stored, due now")
