"""``python -m bench.mix``: a tiny run of the four cases (plugin and plain Celery ETA, small only
and with big messages), each run by a real ``celery worker`` subprocess, every task once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import mix


def test_a_tiny_mix_reports_the_four_cases(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "mix.json"
    args = ["--small", "40", "--big", "2", "--big-mb", "1", "--lead", "2.5", "--save", str(saved)]
    assert mix.main(args) == 0  # run_case raises unless each task ran exactly once
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ms after the due time; 40 small tasks") and "two redis-servers" in out[0]
    results = json.loads(saved.read_text())["results"]
    assert [r["case"] for r in results] == [
        "plugin, small only", "plugin, 2 x 1 MB", "plain Celery ETA, small only", "plain Celery ETA, 2 x 1 MB"]
    assert len(out) == 3 + len(results) and all(line.startswith(f"| {r['case']} |")
                                                for line, r in zip(out[3:], results, strict=True))
    for r in results:
        assert 0 <= r["start_p50_ms"] <= r["start_p99_ms"] <= r["start_max_ms"] <= r["drain_ms"]
        assert math.isnan(r["big_start_max_ms"]) == (r["big"] == 0)
        assert math.isnan(r["dispatch_p50_ms"]) == r["case"].startswith("plain")
    plugin_mix = results[1]
    assert plugin_mix["big_start_max_ms"] >= 0 and plugin_mix["dispatch_max_ms"] >= 0
