"""The pytest plugin shipped with the package (entry point ``pytest11``), opt-in like Celery's own.

Installed, it only adds the ini option ``zset_scheduler_fixtures`` and the flag
``--zset-scheduler-fixtures``; either one turns on the fixtures of :mod:`.fixtures`. So does
``pytest_plugins = ["celery_zset_scheduler.testing.fixtures"]`` in a ``conftest.py`` (or
``-p celery_zset_scheduler.testing.fixtures``), which also works with plugin autoloading off.
"""

from __future__ import annotations

import pytest

FIXTURES = "celery_zset_scheduler.testing.fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("zset_scheduler_fixtures", "Enable celery-zset-scheduler's test fixtures", type="bool",
                  default=False)
    parser.addoption("--zset-scheduler-fixtures", action="store_true", default=False,
                     help="Enable celery-zset-scheduler's test fixtures (zset_app, zset_dispatcher, ...).")


def pytest_configure(config: pytest.Config) -> None:
    enabled = config.getoption("--zset-scheduler-fixtures") or config.getini("zset_scheduler_fixtures")
    if enabled and not config.pluginmanager.has_plugin(FIXTURES):
        config.pluginmanager.import_plugin(FIXTURES)
