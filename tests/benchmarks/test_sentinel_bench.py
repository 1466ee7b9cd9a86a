"""``python -m bench.sentinel``: a tiny run of the rates prints both URLs with figures, and a failover
with ``wait_replicas = 1`` loses no acknowledged schedule (real master, replica and sentinels)."""

from __future__ import annotations

import re

import pytest

from bench import sentinel


def test_a_tiny_run_prints_both_urls(capsys: pytest.CaptureFixture[str]) -> None:
    assert sentinel.main(["--calls", "50", "--dispatch", "500", "--rounds", "1", "--no-failover", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in lines] == ["redis://", "sentinel://"]
    for line in lines:
        found = re.search(r"apply_async\(countdown\) +([\d,]+) calls/s \(plain Celery ([\d,]+)\) "
                          r"+dispatch +([\d,]+) tasks/s", line)
        assert found is not None, line
        assert all(int(g.replace(",", "")) > 0 for g in found.groups())


def test_with_wait_replicas_a_failover_loses_no_acknowledged_schedule() -> None:
    line = sentinel.failover_loss(1, 0, seconds=0.5, lag=1.0, say=lambda _: None)
    found = re.search(r"acknowledged ([\d,]+) .* missing on the promoted master \(port \d+\) ([\d,]+);", line)
    assert found is not None, line
    assert int(found.group(1).replace(",", "")) > 0 and found.group(2) == "0"
