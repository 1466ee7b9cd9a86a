"""What people read: moved tasks show their new due time, counts read the same everywhere, and
the reference the help texts point to ships with the package."""

from __future__ import annotations

import re
import time
from datetime import datetime

from celery_zset_scheduler.celery.cli import zset
from celery_zset_scheduler.celery.cli.docs import reference_text

from ..support.cli_support import ROOT, invoke, out
from ..support.helpers import AppFactory


def test_reschedule_and_run_now_tables_show_the_new_due_time(apps: AppFactory) -> None:
    app = apps()
    task_id = app.send_task("t.record", countdown=3600).id
    moved = invoke(app, "reschedule", task_id, "--eta", "2099-01-02T03:04:05Z", "--yes")
    assert moved.exit_code == 0
    assert re.search(rf"^{task_id}\s+rescheduled\s+2099-01-02T03:04:05\.000Z$", moved.output, re.MULTILINE)
    assert re.search(r"^ID\s+STATUS\s+DUE$", moved.output, re.MULTILINE)
    now = invoke(app, "run-now", task_id, "nope", "--yes")
    assert now.exit_code == 3
    due = re.search(rf"^{task_id}\s+rescheduled\s+(\S+)$", now.output, re.MULTILINE)
    assert due and abs(int(time.time() * 1000) - _ms(due.group(1))) < 5000
    assert re.search(r"^nope\s+not_pending\s+-$", now.output, re.MULTILINE)


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def test_counts_have_thousands_separators_in_the_summary_as_in_the_question(apps: AppFactory) -> None:
    app = apps()
    ids = [f"missing-{i}" for i in range(1200)]
    refused = invoke(app, "cancel", *ids, input="n\n")
    assert "Cancel 1,200 pending tasks?" in refused.output
    done = invoke(app, "cancel", *ids, "--yes")
    assert done.exit_code == 3 and done.output.rstrip().endswith("cancel: 1,200 unknown")
    assert out(invoke(app, "cancel", *ids, "--yes", "--json"))["counts"] == {"unknown": 1200}  # JSON: numbers


def test_the_help_points_to_a_reference_the_package_ships(apps: AppFactory) -> None:
    app = apps()
    for args in ([], ["ls"], ["status"]):
        text = invoke(app, *args, "--help").output
        assert "docs/cli.md" not in text
    assert "celery zset docs" in invoke(app, "--help").output
    assert "docs" in zset.commands
    printed = invoke(app, "docs")
    assert printed.exit_code == 0
    assert printed.output.rstrip("\n") == (ROOT / "docs" / "cli.md").read_text().rstrip("\n")


def test_the_reference_is_package_data() -> None:
    # A wheel carries what setuptools lists as package data: the link in the package is listed.
    assert '"celery_zset_scheduler.celery.cli" = ["cli.md"]' in (ROOT / "pyproject.toml").read_text()
    assert reference_text() == (ROOT / "docs" / "cli.md").read_text()


def test_the_reference_documents_the_format_the_store_uses(apps: AppFactory) -> None:
    from celery_zset_scheduler.model.keys import FORMAT_VERSION

    app = apps()
    app.send_task("t.record", countdown=60)
    detail = next(c["detail"] for c in out(invoke(app, "doctor", "--json"))["checks"] if c["name"] == "shards")
    assert detail.endswith(f"format {FORMAT_VERSION}")
    assert f'"detail": "store \'zset\': 8 shards, format {FORMAT_VERSION}"' in (ROOT / "docs" / "cli.md").read_text()
