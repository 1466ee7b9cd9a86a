# mypy: ignore-errors
"""A smoke suite written with pytest-celery's API: a worker container with this package installed,
a dispatcher beside it (in the test process), and a Redis broker and a RabbitMQ broker container.

pytest-celery's components are Docker containers: without a Docker engine every test here is
skipped with the reason. Run it where Docker runs (the main suite does not: its ``addopts`` turn
pytest-celery's entry point off):

    pip install "pytest-celery[all]>=1.1" && python -m pytest -p pytest_celery tests/pytest_celery
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest


def _docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker command on PATH"
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker info failed: {exc}"
    return None if proc.returncode == 0 else f"docker info failed: {(proc.stderr or proc.stdout).strip()[-300:]}"


_problem = _docker_problem()
if _problem:
    pytest.skip(f"pytest-celery's components run in Docker containers, and there is no Docker engine here "
                f"({_problem})", allow_module_level=True)
pytest_celery = pytest.importorskip("pytest_celery", reason="pytest-celery is not installed "
                                    "(pip install 'pytest-celery[all]')")

from pytest_celery import (  # noqa: E402
    RABBITMQ_PORTS,
    CeleryBrokerCluster,
    CeleryTestSetup,
    CeleryWorkerContainer,
    RabbitMQTestBroker,
    RedisTestBroker,
)
from pytest_docker_tools import build, container, fxtr  # noqa: E402

import celery_zset_scheduler  # noqa: E402
from celery_zset_scheduler.testing.fixtures import RunningDispatcher  # noqa: E402

from . import tasks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
STORE_DB = 5  # the store lives in the Redis backend container, on a database of its own


class ZSetWorkerContainer(CeleryWorkerContainer):
    """pytest-celery's worker, on an image with this package installed; its app is installed too."""

    @classmethod
    def version(cls) -> str:
        return celery_zset_scheduler.__version__

    @classmethod
    def worker_name(cls) -> str:
        return "zset_worker"

    @classmethod
    def worker_queue(cls) -> str:
        return "celery"


zset_worker_image = build(path=str(ROOT), dockerfile="tests/pytest_celery/Dockerfile", tag="pytest-celery/zset:smoke",
                          buildargs=ZSetWorkerContainer.buildargs())

zset_worker_container = container(
    image="{zset_worker_image.id}",
    environment=fxtr("default_worker_env"),
    network="{default_pytest_celery_network.name}",
    volumes={"{default_worker_volume.name}": {"bind": "/app", "mode": "rw"}},
    wrapper_class=ZSetWorkerContainer,
    timeout=120,
    command=ZSetWorkerContainer.command(),
)


@pytest.fixture
def default_worker_container(zset_worker_container: ZSetWorkerContainer) -> ZSetWorkerContainer:
    return zset_worker_container


@pytest.fixture
def default_worker_tasks(default_worker_tasks: set) -> set:
    default_worker_tasks.add(tasks)
    return default_worker_tasks


@pytest.fixture
def default_worker_app_module() -> object:
    from . import worker_app

    return worker_app


@pytest.fixture(params=["redis", "rabbitmq"])
def celery_broker_cluster(request: pytest.FixtureRequest, celery_redis_broker: RedisTestBroker,
                          celery_rabbitmq_broker: RabbitMQTestBroker) -> CeleryBrokerCluster:
    broker = celery_redis_broker if request.param == "redis" else celery_rabbitmq_broker
    cluster = CeleryBrokerCluster(broker)
    yield cluster
    cluster.teardown()


@pytest.fixture
def default_worker_env(default_worker_env: dict, celery_redis_backend) -> dict:
    # The worker reaches the store inside the containers' network, the test process from the host.
    default_worker_env["ZSET_SCHEDULER_URL"] = celery_redis_backend.config()["url"].rsplit("/", 1)[0] + f"/{STORE_DB}"
    return default_worker_env


@pytest.fixture
def zset_setup(celery_setup: CeleryTestSetup, celery_redis_backend) -> CeleryTestSetup:
    """The test's app (host side) installed on the same store, and a dispatcher beside the worker."""
    app = celery_setup.app
    app.conf.zset_scheduler_url = celery_redis_backend.config()["host_url"].rsplit("/", 1)[0] + f"/{STORE_DB}"
    celery_zset_scheduler.install(app)
    running = RunningDispatcher(app)
    yield celery_setup
    running.stop()


def test_a_countdown_runs_at_its_eta(zset_setup: CeleryTestSetup) -> None:
    sent = time.time()
    result = zset_setup.app.send_task("zsmoke.stamp", args=("late",), countdown=3, queue=zset_setup.worker.worker_queue)
    assert celery_zset_scheduler.lookup(zset_setup.app, result.id) is not None  # waiting in the store
    ran = result.get(timeout=60)
    assert ran["tag"] == "late" and ran["at"] - sent >= 3.0


def test_a_revoked_task_never_runs(zset_setup: CeleryTestSetup) -> None:
    app = zset_setup.app
    queue = zset_setup.worker.worker_queue
    doomed = app.send_task("zsmoke.stamp", args=("doomed",), countdown=2, queue=queue)
    doomed.revoke()
    after = app.send_task("zsmoke.stamp", args=("after",), countdown=3, queue=queue)
    assert after.get(timeout=60)["tag"] == "after"
    assert celery_zset_scheduler.lookup(app, doomed.id) is None
    assert doomed.state in ("PENDING", "REVOKED")


__all__ = ["RABBITMQ_PORTS", "zset_worker_image"]
