"""The scale benchmark's outputs: the targets (met / not met), and a markdown page of tables."""

from __future__ import annotations

from typing import Any

# The targets shown next to the figures (not asserted anywhere).
TARGET_FAST = 200_000
TARGET_BURST_S = 10.0
TARGET_GENERIC = 56_000
TARGET_BYTES = 300.0
TARGET_P99_MS = 10.0
TARGET_RSS_GROWTH = 0.10  # "flat": at most 10% above the idle worker's RSS
TARGET_COUNTDOWN_RATIO = 1.5


def _top(r: dict[str, Any]) -> dict[str, Any] | None:
    return r["curve"][-1] if r.get("curve") else None


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the figure it is judged on; ``met`` is None when it was not measured."""
    out: list[dict[str, Any]] = []

    def add(name: str, target: str, measured: float | None, shown: str, met: bool | None) -> None:
        out.append({"name": name, "target": target, "measured": measured, "shown": shown,
                    "met": None if measured is None else met})

    top = _top(r)
    n = f"{top['pending']:,} pending" if top else ""
    v = top["fast_per_s"] if top else None
    add(f"fast path dispatch ({n})", f">= {TARGET_FAST:,} tasks/s", v, f"{v:,} tasks/s" if v else "-",
        v is not None and v >= TARGET_FAST)
    fast_burst = next((b for b in r.get("burst", []) if b["path"] == "fast"), None)
    v = fast_burst["last_in_queue_ms"] / 1000 if fast_burst else None
    what = f"{fast_burst['count']:,} due at one second, {fast_burst['pending']:,} pending" if fast_burst else ""
    add(f"burst, fast path ({what})", f"<= {TARGET_BURST_S:g} s (for 1,000,000)", v,
        f"{v:.2f} s" if v is not None else "-", v is not None and v <= TARGET_BURST_S)
    for key, where in (("generic", "broker on db 1 of the store's server"),
                       ("generic_server", "broker on a server of its own")):
        v = top.get(f"{key}_per_s") if top else None
        add(f"generic path dispatch, {where} ({n})", f">= {TARGET_GENERIC:,} tasks/s", v,
            f"{v:,} tasks/s" if v else "-", v is not None and v >= TARGET_GENERIC)
    v = top["bytes_per_task"] if top else None
    add(f"Redis bytes per pending task ({n})", f"<= {TARGET_BYTES:g} B (at 10,000,000)", v,
        f"{v:,.0f} B" if v else "-", v is not None and v <= TARGET_BYTES)
    late = next((x for x in r.get("lateness", []) if x["path"] == "fast" and x["rate"] == 10_000), None)
    v = late.get("p99_ms") if late else None
    what = f"{late['pending']:,} pending" if late else ""
    add(f"lateness p99 at 10,000 due/s, fast path ({what})", f"<= {TARGET_P99_MS:g} ms (10,000,000 pending)",
        v, f"{v:.0f} ms" if v is not None else (late.get("error", "-") if late else "-"),
        v is not None and v <= TARGET_P99_MS)
    plugin = next((x for x in r.get("rss", []) if x["worker"] == "plugin"), None)
    v = plugin["rss_mb"] / plugin["idle_rss_mb"] - 1 if plugin and plugin["idle_rss_mb"] else None
    what = f"{plugin['backlog']:,} waiting" if plugin else ""
    add(f"worker RSS with the plugin ({what})", f"flat (<= {TARGET_RSS_GROWTH:.0%} above idle)", v,
        f"{plugin['idle_rss_mb']:,} -> {plugin['rss_mb']:,} MB ({v:+.1%})" if plugin and v is not None else "-",
        v is not None and v <= TARGET_RSS_GROWTH)
    v = top["countdown_per_s"] / top["plain_countdown_per_s"] if top and top["plain_countdown_per_s"] else None
    add("apply_async(countdown), ours / plain Celery's", f">= {TARGET_COUNTDOWN_RATIO:g}x", v,
        f"{top['countdown_per_s']:,} / {top['plain_countdown_per_s']:,} calls/s = {v:.2f}x" if top and v else "-",
        v is not None and v >= TARGET_COUNTDOWN_RATIO)
    return out


def _rate(v: int | None) -> str:
    return "-" if v is None else f"{v:,}/s"


def _met(m: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[m]


def markdown(r: dict[str, Any], images: list[str]) -> str:
    env = r["environment"]
    lines = [
        "# Scale: the performance curve in one run",
        "",
        "Written by `python -m bench.scale` (docs/benchmarks.md explains each figure). Do not edit by hand:",
        "run the command again.",
        "",
        f"- command: `{r['command']}`",
        f"- started {r['started_utc']}, took {r['duration_s']:,.0f} s; load average at start {r['loads']['start']},"
        f" at the end {r['loads']['end']}",
        f"- Redis {env['redis']}, {env['cpus']} CPUs, {env['ram_gb']} GB RAM, Python {env['python']}, "
        f"{env['shards']} shards, {env['platform']}",
        "",
        "## Targets",
        "",
        "| target | figure | measured | |",
        "| --- | --- | ---: | --- |",
    ]
    for t in r["targets"]:
        lines.append(f"| {t['target']} | {t['name']} | {t['shown']} | {_met(t['met'])} |")
    if r.get("curve"):
        lines += [
            "", "## Against the number pending", "",
            "Fast path: store and broker on db 0; generic path: the same store, broker on db 1 (one Redis core "
            "runs the store and the broker) or on a redis-server of its own. Each drain is "
            f"{r['options']['drain']:,} tasks due now among the pending ones; lateness at "
            f"{r['options']['stream_rate']:,} due/s for {r['options']['stream_seconds']:g} s on the fast path.",
            "",
            "| pending | bulk schedule_many | apply_async(countdown) ours / plain | bytes per task | fast path "
            "| generic path, broker db 1 | generic path, broker on its own server | plain Celery apply_async() "
            "| lateness p50 / p99 / max | load |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for c in r["curve"]:
            lines.append(
                f"| {c['pending']:,} | {c['bulk_per_s']:,}/s | {c['countdown_per_s']:,} / "
                f"{c['plain_countdown_per_s']:,} calls/s | {c['bytes_per_task']:,.0f} B | {c['fast_per_s']:,}/s "
                f"| {c['generic_per_s']:,}/s | {_rate(c.get('generic_server_per_s'))} "
                f"| {c['plain_apply_async_per_s']:,}/s | {c['lateness_p50_ms']:.0f} / {c['lateness_p99_ms']:.0f} / "
                f"{c['lateness_max_ms']:.0f} ms | {c['load']} |")
    if r.get("burst"):
        lines += ["", "## A burst due at the same second", "",
                  "| path | broker | due at once | pending | last in the queue after | load |",
                  "| --- | --- | ---: | ---: | ---: | --- |"]
        for b in r["burst"]:
            lines.append(f"| {b['path']} | {b.get('broker', '-')} | {b['count']:,} | {b['pending']:,} "
                         f"| {b['last_in_queue_ms'] / 1000:.2f} s "
                         f"| {b['load']} |")
    if r.get("lateness"):
        lines += ["", "## Lateness at a steady rate", "",
                  "| path | broker | due/s | pending | p50 | p99 | max | load |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for x in r["lateness"]:
            where = f"| {x['path']} | {x.get('broker', '-')} "
            if "error" in x:
                lines.append(f"{where}| {x['rate']:,} | {x['pending']:,} | {x['error']} | | | {x['load']} |")
            else:
                lines.append(f"{where}| {x['rate']:,} | {x['pending']:,} | {x['p50_ms']:.0f} ms "
                             f"| {x['p99_ms']:.0f} ms | {x['max_ms']:.0f} ms | {x['load']} |")
    if r.get("dispatchers"):
        lines += ["", "## Dispatchers on one Redis", "",
                  "Each dispatcher a process of its own leading a subset of the shards; Redis CPU is "
                  "`INFO cpu` (sys + user) delta over the wall time (1.0 = one core).", "",
                  "| path | dispatchers | tasks | total rate | Redis CPU | load |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"]
        for d in r["dispatchers"]:
            lines.append(f"| {d['path']} | {d['dispatchers']} | {d['count']:,} | {d['per_second']:,}/s "
                         f"| {d['redis_cpu']} | {d['load']} |")
    if r.get("rss"):
        lines += ["", "## Worker memory with waiting tasks", "",
                  "A real `celery worker` (prefork, one child); VmRSS of the main process and its child.", "",
                  "| worker | sent | idle RSS | RSS with the backlog | per waiting task | held by the worker "
                  "| left in the queue | load |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for x in r["rss"]:
            lines.append(f"| {x['worker']} | {x['backlog']:,} | {x['idle_rss_mb']:,} MB | {x['rss_mb']:,} MB "
                         f"| {x['per_waiting_task_b']:,.0f} B | {x['held_by_worker']:,} | {x['left_in_queue']:,} "
                         f"| {x['load']} |")
    if r.get("errors"):
        lines += ["", "## Stages that failed", ""]
        lines += [f"- {name}: {why}" for name, why in r["errors"].items()]
    if images:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}](images/{name})" for name in images]
    elif r.get("plots_note"):
        lines += ["", f"Plots: {r['plots_note']}"]
    return "\n".join(lines) + "\n"
