"""What the dispatcher's Redis users may do: asked before claiming, and said when refused.

A refused permission is a configuration problem, not an outage: it is logged as
``config.refused`` with the rule that grants it, once a minute at most for the same cause.
"""

from __future__ import annotations

from ..store.acl import missing_permissions, store_refusal
from ..store.client import location
from ..store.pending import Store
from ..store.permissions import refusal, report_refused

GRANT_ALL = "(all of them: celery zset acl --role dispatcher)"


class Permits:
    def __init__(self, store: Store) -> None:
        self.store = store

    def scripts_allowed(self) -> bool:
        """Whether the store's user may run everything the scripts run. Asked before a claim: a
        script refused halfway keeps its first writes (a claim refused after taking entries from
        `due` would lose them). A server that cannot be asked (before Redis 7) and a cluster
        (keys of several slots) are not asked."""
        if self.store.clustered:
            return True
        missing = missing_permissions(self.store.scripts, self.store.keys)
        if not missing:
            return True
        report_refused(f"what the scripts run ({location(self.store.client)})", f"{' '.join(missing)} {GRANT_ALL}",
                       None, "claims nothing until granted; asks again with backoff")
        return False

    def report(self, what: str, exc: BaseException) -> None:
        """Say what the store's (``what == "redis"``) or the broker's user was refused."""
        if what == "redis":
            refused_what, grant = store_refusal(exc, self.store.keys)
            where = location(self.store.client)
        else:
            refused_what, grant = refusal(exc, keys="~<queue>* ~_kombu.binding*")
            where = "the broker"
        report_refused(f"{refused_what} ({where})", f"{grant} {GRANT_ALL}", exc,
                       "tries again with backoff; nothing is handed off or lost meanwhile")
