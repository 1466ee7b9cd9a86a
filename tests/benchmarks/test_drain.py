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


def test_pending_tasks_lie_under_both_drains_and_the_server_takes_its_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert drain.main(["--size", "200", "--rounds", "1", "--shards", "2", "--pending", "1000",
                       "--redis-args", "--maxmemory-policy noeviction --hz 20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["pending", "fast", "generic", "after"]
    stored = re.search(r"pending +1,000 stored at ([\d,]+) tasks/s; server RSS ([\d,]+) MB, AnonHugePages (\d+) MB",
                       lines[0])
    assert stored is not None, lines[0]
    assert int(stored.group(2).replace(",", "")) > 0
    assert re.search(r"after +1,000 still pending; server RSS [\d,]+ MB", lines[3]), lines[3]  # due ones only



def test_the_options_go_to_the_server_it_starts() -> None:
    with pytest.raises(RuntimeError, match="exited at start"):
        drain.main(["--size", "10", "--redis-args", "--no-such-option yes"])
