"""The pytest plugin shipped with the package, used as a user would: a test file of a user's project
run by pytest in a subprocess, with the plugin's fixtures beside ``celery.contrib.pytest``."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USER_TESTS = '''
import pytest
from celery.contrib.testing.worker import start_worker


def test_a_countdown_runs_under_start_worker(zset_app, zset_dispatch_beside_workers):
    @zset_app.task(name="shop.add")
    def add(x, y):
        return x + y

    with start_worker(zset_app, pool="solo", perform_ping_check=False):
        result = add.apply_async((2, 3), countdown=1)
        assert result.get(timeout=30) == 5


def test_a_dispatcher_of_the_tests_own(zset_app, zset_dispatcher):
    @zset_app.task(name="shop.mul")
    def mul(x, y):
        return x * y

    zset_dispatcher(zset_app)
    with start_worker(zset_app, pool="solo", perform_ping_check=False):
        assert mul.apply_async((2, 3), countdown=0.5).get(timeout=30) == 6


@pytest.fixture
def celery_config(zset_config):
    return zset_config


def test_with_celery_contrib_pytest(zset_celery_app, zset_celery_worker):
    @zset_celery_app.task(name="shop.sub")
    def sub(x, y):
        return x - y

    zset_celery_worker.reload()
    assert sub.apply_async((5, 3), countdown=1).get(timeout=30) == 2
'''


@pytest.fixture
def user_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    # The plugin is named on the command line whether or not this checkout is installed (an installed
    # one also registers it through its entry point, and pytest refuses the same module twice).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(test_shop=USER_TESTS)
    return pytester


@pytest.mark.timeout(240)
def test_the_fixtures_run_countdown_tasks_beside_celerys_workers(user_project: pytest.Pytester) -> None:
    result = user_project.runpytest_subprocess(
        "-p", "celery_zset_scheduler.testing.pytest_plugin", "--zset-scheduler-fixtures",
        "-p", "celery.contrib.pytest", "-p", "pytest_timeout", "-p", "no:cacheprovider", timeout=200)
    result.assert_outcomes(passed=3)


def test_the_fixtures_are_off_until_asked_for(user_project: pytest.Pytester) -> None:
    result = user_project.runpytest_subprocess("-p", "celery_zset_scheduler.testing.pytest_plugin",
                                               "-p", "celery.contrib.pytest", "-k", "start_worker", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'zset_app' not found*"])


def test_the_plugin_is_an_entry_point() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.entry-points.pytest11]", 1)[1].split("\n[", 1)[0]
    assert 'celery_zset_scheduler = "celery_zset_scheduler.testing.pytest_plugin"' in section


def test_an_installed_package_loads_the_plugin_by_its_entry_point(pytester: pytest.Pytester) -> None:
    installed = [ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "celery_zset_scheduler"]
    if not installed:
        pytest.skip("this checkout is not installed (pip install -e .), so it has no entry point")
    pytester.makepyfile(test_opt="def test_flag(pytestconfig):\n"
                                 "    assert pytestconfig.getoption('zset_scheduler_fixtures') is False\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1)
