"""From a venv with the package installed (any release in the supported range): a countdown task
scheduled through ``install(app)`` is dispatched by ``celery zset run`` and run by a worker.

Usage: python .ci/smoke.py   (starts its own redis-server on a free loopback port; exit 0 = it worked)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import celery
import kombu
import redis

from celery_zset_scheduler.testing import RedisServer

APP = '''
import os
from celery import Celery
import celery_zset_scheduler

url = os.environ["SMOKE_REDIS"]
app = Celery("smoke", broker=url + "/1", backend=url + "/2")
app.conf.zset_scheduler_url = url + "/0"
celery_zset_scheduler.install(app)


@app.task(name="smoke.add")
def add(a, b):
    return a + b
'''


def main() -> int:
    print(f"celery {celery.__version__}, kombu {kombu.__version__}, redis-py {redis.__version__}, "
          f"Python {sys.version.split()[0]}")
    server = RedisServer().start()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "smoke_app.py").write_text(APP)
        env = {**os.environ, "SMOKE_REDIS": f"redis://127.0.0.1:{server.port}", "PYTHONPATH": folder}
        sys.path.insert(0, folder)
        os.environ.update(env)
        try:
            from smoke_app import add, app

            result = add.apply_async((2, 3), countdown=1)
            store = redis.Redis(port=server.port, db=0)
            assert store.dbsize() > 0, "nothing was stored"
            celery_bin = [sys.executable, "-m", "celery", "-A", "smoke_app"]
            procs.append(subprocess.Popen([*celery_bin, "zset", "run", "--loglevel", "INFO"], env=env, cwd=folder))
            procs.append(subprocess.Popen([*celery_bin, "worker", "--pool", "solo", "--loglevel", "WARNING",
                                           "--without-gossip", "--without-mingle"], env=env, cwd=folder))
            started = time.monotonic()
            value = result.get(timeout=60)
            assert value == 5, value
            print(f"ok: the countdown task ran through the store ({time.monotonic() - started:.1f} s after start)")
            app.close()
            return 0
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
            server.close()


if __name__ == "__main__":
    sys.exit(main())
