"""``python -m bench.drain``: a tiny run prints one line per path and round, with every task
dispatched (real redis-server, real dispatcher)."""

from __future__ import annotations

import re
import subprocess

import pytest

from bench import drain
from celery_zset_scheduler.testing import find_redis_server


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
        cpu = re.search(r"dispatcher ([\d.]+) µs a task(, broker ([\d.]+))?  load", line)
        assert cpu is not None and float(cpu.group(1)) > 0, line
        assert (cpu.group(2) is not None) == (where != [] and line.startswith("generic")), line


def test_pending_tasks_lie_under_both_drains_and_still_wait_after_them(
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


def test_the_tables_show_a_move_to_a_doubled_table_under_way_after_the_fill_and_ended_by_the_drains(
        capsys: pytest.CaptureFixture[str]) -> None:
    """1,100 entries a shard: on Redis the fill crosses 1,024 and leaves both tables moving to
    2,048, a bucket a command on the key; the drains' commands end the move (never above 2,048
    entries). Valkey 8's tables grow otherwise: there each line shows a table."""
    assert drain.main(["--size", "800", "--rounds", "2", "--shards", "1", "--pending", "1100", "--tables"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["pending", "tables", *["fast", "tables", "generic", "tables"] * 2,
                                                   "after"]
    tables = [line for line in lines if line.startswith("tables")]
    version = subprocess.run([find_redis_server(), "--version"], capture_output=True, text=True, check=True).stdout
    if version.startswith("Redis"):
        assert re.fullmatch(r"tables +shard 0: msg moving 1,024 -> 2,048, \d+% moved; "
                            r"due moving 1,024 -> 2,048, \d+% moved", tables[0]), tables[0]
        assert re.fullmatch(r"tables +shard 0: msg table 2,048; due table 2,048", tables[-1]), tables[-1]
    else:
        table = r"(?:moving [\d,]+ -> [\d,]+, \d+% moved|table [\d,]+)"
        for line in tables:
            assert re.fullmatch(rf"tables +shard 0: msg {table}; due {table}", line), line
