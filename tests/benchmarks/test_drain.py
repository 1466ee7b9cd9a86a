"""``python -m bench.drain``: a tiny run prints one line per path and round, with every task
dispatched (real redis-server, real dispatcher)."""

from __future__ import annotations

import re

import pytest

from bench import drain


@pytest.mark.parametrize("where", [[], ["--broker-server"]])
def test_a_tiny_run_prints_each_path_with_its_redis_time(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    assert drain.main(["--size", "300", "--rounds", "1", "--shards", "2", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["fast", "generic"]
    for line in lines:
        found = re.search(r"([\d,]+) tasks/s +Redis CPU +([\d.]+) µs a task +\(µs a task: (.+)\)", line)
        assert found is not None, line
        assert int(found.group(1).replace(",", "")) > 0 and float(found.group(2)) > 0
        assert "evalsha" in found.group(3)  # the claim (or the fast path's push) is a script
