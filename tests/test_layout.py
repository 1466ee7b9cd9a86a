"""The package's shape: small modules, and the Celery layer's roles saying what they are."""

from __future__ import annotations

import ast
from pathlib import Path

import celery_zset_scheduler

PACKAGE = Path(celery_zset_scheduler.__file__).parent
MOST_LINES = 400
ROLES = ("core", "transport", "producer", "worker", "periodic", "publishers", "backlog", "dispatcher", "cli")


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MOST_LINES}
    assert long == {}


def test_every_role_of_the_celery_layer_says_which_process_runs_it_and_what_it_may_import() -> None:
    found = sorted(p.name for p in (PACKAGE / "celery").iterdir() if (p / "__init__.py").exists())
    assert found == sorted(ROLES)
    for role in ROLES:
        doc = ast.get_docstring(ast.parse((PACKAGE / "celery" / role / "__init__.py").read_text())) or ""
        assert "Run by" in doc and "import" in doc.lower(), role


def test_only_the_wiring_module_sits_beside_the_roles() -> None:
    # A module of one role belongs in its folder; install(app) ties the producer and worker to an app.
    assert sorted(p.name for p in (PACKAGE / "celery").glob("*.py")) == ["__init__.py", "install.py"]
