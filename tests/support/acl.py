"""ACL users made from exactly the rules `celery zset acl` prints, for the tests that run as one."""

from __future__ import annotations

import itertools
import os
from typing import Any

import redis

from celery_zset_scheduler.celery.core.acl import plan_users
from celery_zset_scheduler.store.acl import ROLES, Rules

#: Set (to anything) to run every app of the suite as an ACL user of its own (the core slice at
#: the ends does), made from the rules of every role.
AS_ACL_USER = "ZSET_TEST_ACL"
PASSWORD = "acl-pw"
_names = itertools.count(1)


def acl_mode() -> bool:
    return bool(os.environ.get(AS_ACL_USER))


def rules_for(app: Any, roles: tuple[str, ...] = ROLES) -> Rules:
    """The union of ``roles``' rules for the app (whose servers are all one test server)."""
    merged = Rules()
    for role in roles:
        for plan in plan_users(app, role):
            merged = merged + plan.rules
    return merged


def create_user(admin: redis.Redis, rules: Rules | list[str], name: str | None = None) -> str:
    """Create (or reset) the user with exactly ``rules``; its name."""
    name = name or f"acl{next(_names)}-{os.getpid()}"
    words = rules.words() if isinstance(rules, Rules) else list(rules)
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{PASSWORD}", *words)
    return name


def as_user(url: str, name: str) -> str:
    """``url`` (``redis://host:port/db``, no credentials) with the user's credentials."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{name}:{PASSWORD}@{rest}"


# redis-py sends CLIENT SETINFO on connecting and ignores a refusal: it is not granted, since
# servers before Redis 7.2 refuse a rule naming it (docs/acl.md). Redis 6.2 logs it as "client".
IGNORED = {"client|setinfo", "client"}


def refusals(admin: redis.Redis, name: str) -> list[dict[str, Any]]:
    """What the server refused the user (its ACL LOG entries), oldest first."""
    entries = admin.acl_log(count=1000)
    return [e for e in reversed(entries) if e.get("username") == name and _text(e.get("object")) not in IGNORED]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
