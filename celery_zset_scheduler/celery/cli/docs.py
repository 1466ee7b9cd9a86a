"""``celery zset docs``: the command-line reference (docs/cli.md), shipped inside the package.

The help texts point here rather than to a file of the source tree: an installed wheel has no
docs/ folder, and the reference must match the installed version.
"""

from __future__ import annotations

from importlib import resources

import click

REFERENCE = "cli.md"  # in the package: a link to docs/cli.md, copied into the wheel when it is built


def reference_text() -> str:
    return resources.files(__package__).joinpath(REFERENCE).read_text(encoding="utf-8")


@click.command()
def docs() -> None:
    """Print the reference: every command, its --json schema, exit codes, metrics and log lines."""
    click.echo_via_pager(reference_text())
