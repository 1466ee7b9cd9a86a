"""PNG plots of a scale run (matplotlib, the optional ``bench`` extra). Names are stable, so the
docs link to them and a new run replaces them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RATE = "scale-rate.png"
LATENESS = "scale-lateness.png"
BYTES = "scale-bytes.png"
DISPATCHERS = "scale-dispatchers.png"
RSS = "scale-rss.png"

MISSING = ("matplotlib is not installed: `pip install -e '.[bench]'` (or `pip install matplotlib`), "
           "or run with --no-plots")


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plots(r: dict[str, Any], folder: Path) -> list[str]:
    """Every plot the run has data for, into ``folder``; returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        written.append(name)

    curve = r.get("curve") or []
    if curve:
        xs = [c["pending"] for c in curve]
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for key, label in (("fast_per_s", "fast path (store and broker on one db)"),
                           ("generic_per_s", "generic path (broker on another db)"),
                           ("generic_server_per_s", "generic path (broker on another server)"),
                           ("plain_apply_async_per_s", "plain Celery apply_async()"),
                           ("bulk_per_s", "bulk schedule_many")):
            if all(key in c for c in curve):  # a run saved before a lane was added lacks it
                ax.plot(xs, [c[key] for c in curve], marker="o", label=label)
        ax.set(xscale="log", yscale="log", xlabel="pending tasks", ylabel="tasks/s",
               title="Rates against the number pending")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, RATE)

        fig, ax = plt.subplots(figsize=(7, 4.2))
        for key, label in (("lateness_p50_ms", "p50"), ("lateness_p99_ms", "p99"), ("lateness_max_ms", "max")):
            ax.plot(xs, [c[key] for c in curve], marker="o", label=label)
        ax.set(xscale="log", xlabel="pending tasks", ylabel="ms late",
               title=f"Lateness at {r['options']['stream_rate']:,} due/s (fast path)")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, LATENESS)

        fig, ax = plt.subplots(figsize=(7, 4.2))
        ax.plot(xs, [c["bytes_per_task"] for c in curve], marker="o", label="Redis bytes per pending task")
        ax.axhline(300, linestyle="--", color="grey", label="target 300 B")
        ax.set(xscale="log", xlabel="pending tasks", ylabel="bytes", title="Redis memory per pending task")
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        save(fig, BYTES)

    multi = r.get("dispatchers") or []
    if multi:
        fig, ax1 = plt.subplots(figsize=(7, 4.2))
        ax2 = ax1.twinx()
        for path in sorted({d["path"] for d in multi}):
            rows = [d for d in multi if d["path"] == path]
            ks = [d["dispatchers"] for d in rows]
            ax1.plot(ks, [d["per_second"] for d in rows], marker="o", label=f"{path} path, total tasks/s")
            ax2.plot(ks, [d["redis_cpu"] or 0 for d in rows], marker="x", linestyle=":",
                     label=f"{path} path, Redis CPU (cores)")
        ax1.set(xlabel="dispatcher processes", ylabel="tasks/s", title="Dispatchers on one Redis")
        ax1.set_xticks(sorted({d["dispatchers"] for d in multi}))
        ax1.set_ylim(bottom=0)
        ax2.set_ylabel("Redis CPU (1.0 = one core)")
        ax2.set_ylim(0, max(1.1, max((d["redis_cpu"] or 0) for d in multi) * 1.1))
        h1, l1 = ax1.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax1.legend(h1 + h2, l1 + l2, fontsize=8, loc="lower right")
        ax1.grid(True, alpha=0.3)
        save(fig, DISPATCHERS)

    rss = r.get("rss") or []
    if rss:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        labels = [x["worker"] for x in rss]
        idle = [x["idle_rss_mb"] for x in rss]
        full = [x["rss_mb"] for x in rss]
        pos = range(len(rss))
        ax.bar([p - 0.2 for p in pos], idle, width=0.4, label="idle")
        ax.bar([p + 0.2 for p in pos], full, width=0.4, label=f"{rss[0]['backlog']:,} tasks waiting")
        for p, v in zip(pos, full, strict=True):
            ax.annotate(f"{v:,.0f} MB", (p + 0.2, v), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(pos), labels)
        ax.set(ylabel="worker RSS, MB (main process + child)", title="celery worker memory with waiting tasks")
        ax.legend(fontsize=8)
        save(fig, RSS)
    return written
