"""Every command the README shows, run as written (or in its closest non-interactive form) from a
clean checkout: a git repository holding only this checkout's tracked files, cloned as the README
says, with environments made from nothing but what the commands themselves install."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from celery_zset_scheduler.testing import RedisServer

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
#: How each command the README shows is run here, when not exactly as written: a demo and an
#: example of a few seconds instead of minutes; the clone's URL is the clean checkout's path.
CLOSEST = {
    "make demo": 'make demo ARGS="--tasks 2000 --seconds 5"',
    "make example": 'make example ARGS="--count 300 --over 1m --seconds 8"',
    "make bench": ('make bench ARGS="--size 5000 --calls 500 --dispatch 2000 --stream-seconds 2 --periodic 0 '
                   '--rabbitmq off"'),
}


def shown_commands() -> list[str]:
    """The README's shell commands: each line of its ``sh`` blocks (comments cut), and the
    ``make`` targets it names in its text."""
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", README, re.DOTALL):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line:
                commands.append(line)
    for target in re.findall(r"`make ([a-z]+)`", README):
        if f"make {target}" not in commands:
            commands.append(f"make {target}")
    return commands


def test_the_readme_shows_the_commands_this_file_runs() -> None:
    assert shown_commands() == [
        "make demo", "make test",
        "git clone <this repository's URL> celery-zset-scheduler", "pip install ./celery-zset-scheduler",
        "celery -A proj zset run", "celery -A proj beat -S zset",
        "make docs", "make example", "make bench",
    ]


def run(cmd: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a shell on a fresh machine: no venv, no PYTHONPATH of this suite."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not k.startswith(("PYTEST", "ZSET_", "COV"))}
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bindir)
    return {**env, **extra}


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of this checkout's tracked files (as they are in the working tree)."""
    repo = tmp_path_factory.mktemp("origin")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source, target = ROOT / name, repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.exists():  # a tracked file deleted in the working tree is not in the checkout
            shutil.copy2(source, target)
    env = clean_env(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@localhost", GIT_COMMITTER_NAME="t",
                    GIT_COMMITTER_EMAIL="t@localhost")
    for cmd in ("git init -q", "git add -A", "git commit -q -m checkout"):
        run(cmd, repo, env, 60)
    return repo


@pytest.fixture(scope="module")
def clone(origin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``git clone <this repository's URL> celery-zset-scheduler``, the URL being the checkout's."""
    where = tmp_path_factory.mktemp("user")
    command = shown_commands()[2].replace("<this repository's URL>", str(origin))
    run(command, where, clean_env(), 120)
    return where / "celery-zset-scheduler"


def test_make_demo(clone: Path) -> None:
    done = run(CLOSEST["make demo"], clone, clean_env(), 900)
    summary = done.stdout.split("Summary")[-1]
    assert re.search(r"scheduled\s+2,000", summary) and re.search(r"executed\s+2,000", summary), done.stdout[-2000:]
    assert re.search(r"lost\s+0\b", summary), summary


def test_make_test_is_what_ci_runs() -> None:
    # Running the whole suite from inside it would run this test again: CI runs `make test`, as
    # written, on a clean checkout (.ci/run), and the clone here makes its environment the same way.
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: lint type pytest$", makefile, re.MULTILINE)


def test_make_docs(clone: Path) -> None:
    run("make docs", clone, clean_env(), 600)
    assert (clone / "site" / "index.html").is_file()
    assert (clone / "site" / "api" / "index.html").read_text().count("install") > 0


def test_make_example(clone: Path) -> None:
    port = _free_port()
    done = run(CLOSEST["make example"], clone, clean_env(SHOP_PORT=str(port)), 900)
    assert "Started: the dev server, a worker, two dispatchers" in done.stdout, done.stdout[-3000:]
    assert "Admin: http://127.0.0.1:" in done.stdout


def test_make_bench(clone: Path) -> None:
    done = run(CLOSEST["make bench"], clone, clean_env(), 600)
    assert re.search(r"bulk schedule_many \(tasks/s\)\s+[\d,]+\s+[\d,]+", done.stdout), done.stdout[-3000:]


@pytest.fixture(scope="module")
def installed(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install ./celery-zset-scheduler`` in a new venv, beside the clone."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / "bin"
    command = shown_commands()[3]
    run(f"{bindir}/{command}", clone.parent, clean_env(), 600)
    return bindir


@pytest.fixture(scope="module")
def proj(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RedisServer]]:
    """The README's ``proj/celery.py``, its broker a redis-server of its own (the README's is on
    localhost:6379, which this suite never targets)."""
    server = RedisServer().start()
    try:
        code = re.search(r"```python\n(# proj/celery.py\n.*?)```", README, re.DOTALL)
        assert code is not None
        source = code.group(1).replace("redis://localhost:6379/0", server.url)
        assert server.url in source
        where = tmp_path_factory.mktemp("proj")
        (where / "proj").mkdir()
        (where / "proj" / "__init__.py").write_text("")
        (where / "proj" / "celery.py").write_text(source)
        yield where, server
    finally:
        server.close()


@pytest.mark.parametrize("index", [4, 5], ids=["zset run", "beat -S zset"])
def test_a_dispatcher_runs_as_the_readme_says(index: int, installed: Path,
                                              proj: tuple[Path, RedisServer]) -> None:
    where, server = proj
    command = shown_commands()[index]
    env = clean_env(PATH=f"{installed}{os.pathsep}{clean_env()['PATH']}", PYTHONPATH=str(where))
    process = subprocess.Popen(command, shell=True, cwd=where, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    client = redis.Redis.from_url(server.url)
    try:
        deadline = time.monotonic() + 60
        leaders: list[bytes | None] = []
        while time.monotonic() < deadline and process.poll() is None:
            leaders = [client.get(f"{{zset:{s}}}:lock") for s in range(8)]
            if all(leaders):
                break
            time.sleep(0.2)
        assert all(leaders), f"no leader on every shard: {leaders}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        client.flushall()
    assert "Traceback" not in out, out[-3000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
