"""``celery zset acl``: the least-privilege ``ACL SETUSER`` for a role, from the app's settings."""

from __future__ import annotations

import json

import click

from ...store.acl import ROLES
from ..core.acl import plan_users
from .group import app_of
from .options import common


@click.command()
@click.option("--role", type=click.Choice(ROLES), required=True,
              help="producer (sends tasks), worker, dispatcher, or cli (these commands and the admin).")
@click.option("--user", default=None, metavar="NAME",
              help="User name when the URL names none (default zset-ROLE).")
@click.option("--queue", "queues", multiple=True, metavar="NAME",
              help="A queue the app routes to without declaring it in task_queues (repeatable).")
@common
@click.pass_context
def acl(ctx: click.Context, role: str, user: str | None, queues: tuple[str, ...], as_json: bool) -> None:
    """Print the ACL SETUSER rules ROLE needs on each Redis server of the app.

    Commands by name, the store's key patterns (following zset_scheduler_prefix), Kombu's and
    Celery's keys on a Redis broker or result backend, and the channels. The password is given by
    its SHA-256 when the URL has one. ACL rules are not replicated: run them on every node (the
    master and each replica), then ACL SAVE where users live in an ACL file.
    """
    plans = plan_users(app_of(ctx), role, extra_queues=queues)
    if as_json:
        click.echo(json.dumps([{
            "server": p.server.label, "serves": list(p.serves), "rules": p.rules.words(),
            "command": p.command(role, user),
        } for p in plans], indent=2))
        return
    for plan in plans:
        click.echo(f"# {plan.server.label}: {', '.join(plan.serves)} (role {role})")
        click.echo(plan.command(role, user))
