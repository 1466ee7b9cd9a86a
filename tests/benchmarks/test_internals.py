"""``python -m bench.internals``: every case measured, each internal's public path included."""

from __future__ import annotations

import pytest

from bench import internals as bench_internals
from celery_zset_scheduler.model import internals


def test_a_tiny_run_prints_every_case_next_to_plain_celery(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_internals.main(["--size", "300", "--calls", "50", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    assert set(rows) == {"case", "plain Celery", *(label for label, _ in bench_internals.CASES)}
    for label, _ in bench_internals.CASES:
        cells = [c.strip() for c in rows[label].strip("|").split("|")][1:]
        assert len(cells) == 6 and all(cells), rows[label]  # every path measured in every case
        assert float(cells[2].replace(",", "")) > 0
    assert not internals.forced()  # the run leaves the process as it found it


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(SystemExit):
        bench_internals.main(["--size", "0"])
