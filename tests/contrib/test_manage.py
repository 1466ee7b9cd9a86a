"""``manage.py zset``: the same click commands as ``celery zset``, on the app the admin shows."""

from __future__ import annotations

import json

import pytest
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError

from .conftest import BigStore, fill


def test_call_command_runs_the_celery_zset_commands(big: BigStore, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("zset", "status", "--json")
    status = json.loads(capsys.readouterr().out)
    assert status["shard_count"] == 4 and status["totals"]["pending"] >= 100_000
    (task_id,) = fill(big.app, 1, task="shop.charge", countdown=3_600)
    call_command("zset", "show", task_id, "--json")
    assert json.loads(capsys.readouterr().out)["task"] == "shop.charge"
    call_command("zset", "cancel", task_id, "--yes", "--json")
    assert json.loads(capsys.readouterr().out)["counts"] == {"cancelled": 1}
    with pytest.raises(CommandError) as error:
        call_command("zset", "show", task_id)
    assert error.value.returncode == 3 and "no pending or in-flight task" in str(error.value)


def test_manage_py_hands_its_arguments_and_help_to_click(big: BigStore, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        ManagementUtility(["manage.py", "zset", "dlq", "ls", "--json", "--limit", "3"]).execute()
    assert done.value.code == 0
    assert len(json.loads(capsys.readouterr().out)["dead_letters"]) == 3
    with pytest.raises(SystemExit):
        ManagementUtility(["manage.py", "zset", "--help"]).execute()
    text = capsys.readouterr().out
    assert "Usage: manage.py zset" in text and "reschedule" in text and "dlq" in text
    with pytest.raises(SystemExit) as bad:
        ManagementUtility(["manage.py", "zset", "ls", "--limit", "0"]).execute()
    assert bad.value.code == 2


def test_djangos_own_options_are_not_passed_on_to_click() -> None:
    from celery_zset_scheduler.contrib.django.management.commands.zset import _without_django_options

    args = ["--settings", "shop.settings", "ls", "--pythonpath=.", "--limit", "3"]
    assert _without_django_options(args) == ["ls", "--limit", "3"]


def test_manage_py_zset_reshard_dry_run(big: BigStore, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("zset", "reshard", "--to", "8", "--dry-run", "--json")
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] is True and plan["shards_from"] == 4 and len(plan["shards"]) == 8
    assert sum(s["moving"] + s["kept"] for s in plan["shards"]) >= 100_000
