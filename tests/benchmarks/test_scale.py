"""``python -m bench.scale`` end to end at a tiny size: it writes the table, the JSON and the plots.

Behaviour only (which figures exist, that every task was accounted for), never timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def run(*args: str, timeout: float = 480) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_tiny_run_writes_the_table_the_json_and_the_plots(tmp_path: Path) -> None:
    out, saved = tmp_path / "docs", tmp_path / "new" / "scale.json"  # a folder made for it
    done = run("-m", "bench.scale", "--size", "2000", "--quick", "--dispatchers", "1,2",
               "--out", str(out), "--save", str(saved), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert json.loads(saved.read_text()) == r
    assert r["errors"] == {}  # every stage ran to its end

    [row] = r["curve"]
    assert row["pending"] >= 2000
    assert row["fast_queued"] == row["generic_queued"] == row["generic_server_queued"] == 2000
    for key in ("bulk_per_s", "countdown_per_s", "plain_countdown_per_s", "plain_apply_async_per_s",
                "fast_per_s", "generic_per_s", "generic_server_per_s", "bytes_per_task", "lateness_p99_ms"):
        assert row[key] > 0, key
    assert [(b["path"], b["broker"], b["count"], b["queued"]) for b in r["burst"]] == [
        ("fast", "db 0", 1000, 1000), ("generic", "db 1", 1000, 1000), ("generic", "own server", 1000, 1000)]
    assert sorted((x["path"], x["broker"], x["rate"]) for x in r["lateness"]) == [
        ("fast", "db 0", 1000), ("fast", "db 0", 10000), ("generic", "db 1", 1000), ("generic", "db 1", 10000),
        ("generic", "own server", 1000), ("generic", "own server", 10000)]
    multi = [(d["path"], d["dispatchers"], d["dispatched"] == d["count"]) for d in r["dispatchers"]]
    assert multi == [("fast", 1, True), ("fast", 2, True), ("generic", 1, True), ("generic", 2, True)]
    assert all(d["redis_cpu"] is not None and d["redis_cpu"] > 0 for d in r["dispatchers"])
    plain, plugin = r["rss"]
    assert (plain["worker"], plugin["worker"]) == ("plain Celery", "plugin")
    assert plain["held_by_worker"] >= 2000 and plugin["held_by_worker"] == 0  # where the tasks wait
    assert plain["left_in_queue"] == plugin["left_in_queue"] == 0
    assert plain["rss_mb"] > 0 and plugin["rss_mb"] > 0 and plain["processes"] == plugin["processes"] == 2
    assert len(r["targets"]) == 8 and all(t["met"] in (True, False) for t in r["targets"])

    page = (out / "scale.md").read_text()
    assert "## Targets" in page and "| pending | bulk schedule_many" in page and "## Worker memory" in page
    names = {"scale-rate.png", "scale-lateness.png", "scale-bytes.png", "scale-dispatchers.png", "scale-rss.png"}
    assert {Path(p).name for p in r["images"]} == names
    for name in names:
        assert (out / "images" / name).read_bytes()[:8] == PNG
        assert f"](images/{name})" in page


def test_without_matplotlib_it_says_so_before_measuring(tmp_path: Path) -> None:
    # None in sys.modules makes `import matplotlib` raise ImportError, as on a machine without it.
    code = ("import sys; sys.modules['matplotlib'] = None; from bench.scale import main; "
            f"sys.exit(main(['--size', '2000', '--quick', '--out', {str(tmp_path)!r}]))")
    done = run("-c", code, timeout=60)
    assert done.returncode == 2
    assert "matplotlib is not installed" in done.stderr and "--no-plots" in done.stderr
    assert not (tmp_path / "scale.md").exists()


def test_a_save_path_it_cannot_write_is_refused_before_measuring(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    done = run("-m", "bench.scale", "--size", "2000", "--quick", "--no-plots", "--out", str(tmp_path / "docs"),
               "--save", str(blocked / "scale.json"), timeout=60)
    assert done.returncode == 2
    assert f"cannot write --save {blocked / 'scale.json'}" in done.stderr
    assert "pending" not in done.stderr  # no stage began
    assert not (tmp_path / "docs").exists()
