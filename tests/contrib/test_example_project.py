"""The example shop for real: ``manage.py`` with its own settings (the Celery app configured from
Django's ``CELERY_`` settings), migrations, ``seed`` and ``zset`` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from celery_zset_scheduler.testing import RedisServer

ROOT = Path(__file__).resolve().parents[2]
SHOP = ROOT / "example_project"


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, str(SHOP / "manage.py"), *args], cwd=SHOP, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_shop_migrates_seeds_and_answers_manage_py_zset(redis_server: RedisServer, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SHOP_REDIS_URL": redis_server.url_db(5),
           "SHOP_PREFIX": f"shop-test-{os.getpid()}", "SHOP_DB": str(tmp_path / "db.sqlite3")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    assert "no issues" in manage(env, "check")
    manage(env, "migrate", "--noinput", "-v", "0")
    seeded = manage(env, "seed", "--count", "3000", "--over", "1h", "--start", "1h", "--seed", "7")
    assert "Scheduled 3,000 tasks" in seeded and "3,000/3,000 tasks" in seeded
    status = json.loads(manage(env, "zset", "status", "--json"))
    assert status["totals"]["pending"] == 3000 and status["shard_count"] == 8
    charges = json.loads(manage(env, "zset", "ls", "--task", "shop.charge", "--limit", "1000", "--json"))
    assert charges["tasks"] and all(t["task"] == "shop.charge" for t in charges["tasks"])
    redis_server.client(5).flushdb()
