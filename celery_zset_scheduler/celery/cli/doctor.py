"""``celery zset doctor``: check the setup; exits non-zero when a check fails."""

from __future__ import annotations

import click

from .checks import run_checks
from .group import app_of
from .options import common
from .output import ExitCode, emit_json, table

MARK = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "red")}


@click.command()
@common
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check Redis (version, eviction policy, persistence, clock), the store, the broker and the workers."""
    checks = run_checks(app_of(ctx))
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        emit_json({"ok": not failed, "checks": [{"name": c.name, "status": c.status, "detail": c.detail}
                                                for c in checks]})
    else:
        colour = {label: fg for label, fg in MARK.values()}

        def style(column: int, raw: str, padded: str) -> str:
            return click.style(padded, fg=colour[raw]) if column == 0 else padded

        rows = [(MARK[c.status][0], c.name, c.detail) for c in checks]
        click.echo(table(["STATUS", "CHECK", "DETAIL"], rows, style=style))
    if failed:
        ctx.exit(int(ExitCode.CHECK_FAILED))
