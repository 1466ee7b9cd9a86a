"""``manage.py zset …``: the ``celery zset`` commands (status, ls, show, cancel, reschedule,
run-now, run, doctor, dlq …) on the app the admin pages show.

The command hands its arguments to the same click group as ``celery -A proj zset``, so every
command and option is defined once and behaves the same in both.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import click
from celery.bin.base import CLIContext
from django.core.management.base import BaseCommand, CommandError

from .....celery.cli import zset
from ...conf import celery_app

# Django's own options, already applied by manage.py before the command runs.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


def run(args: list[str], prog_name: str, *, standalone: bool) -> int:
    """Run ``zset ARGS``; returns the exit code (standalone: exits the process as click does)."""
    obj = CLIContext(app=celery_app(), no_color=bool(os.environ.get("NO_COLOR")), workdir=None)
    result = zset.main(args=args, prog_name=prog_name, obj=obj, standalone_mode=standalone)
    return int(result or 0) if isinstance(result, int) else 0


def _without_django_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _DJANGO_OPTIONS:
            skip = True
            continue
        if arg.startswith(tuple(f"{o}=" for o in _DJANGO_OPTIONS)):
            continue
        kept.append(arg)
    return kept


class Command(BaseCommand):
    help = "The celery zset commands: status, ls, show, cancel, reschedule, run-now, run, doctor, dlq."

    def run_from_argv(self, argv: list[str]) -> None:
        # click parses everything after the command's name, so options and --help are click's.
        run(_without_django_options(argv[2:]), f"{os.path.basename(argv[0])} {argv[1]}", standalone=True)

    def print_help(self, prog_name: str, subcommand: str) -> None:
        run(["--help"], f"{os.path.basename(prog_name)} {subcommand}", standalone=True)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="a zset command and its options")

    def handle(self, *args: Any, **options: Any) -> None:
        """``call_command("zset", "status", "--json")``: click prints to this process's stdout."""
        try:
            code = run([str(a) for a in args], "manage.py zset", standalone=False)
        except click.ClickException as exc:
            raise CommandError(exc.format_message(), returncode=exc.exit_code) from None
        except click.Abort:
            raise CommandError("aborted", returncode=1) from None
        if code:
            raise CommandError(f"zset {' '.join(map(str, args))}: exit code {code}", returncode=code)
