"""Whether the store's Redis user may write: asked before a process's first write.

Redis does not undo a script's writes when a later command of the script is refused, so a user
without one permission a script needs would leave half of a write behind (a payload without its
entry, a revoke that removed an entry but kept its payload). The permissions are asked first
(without running anything, :func:`.acl.missing_permissions`), once, and again after any refusal;
a refusal is raised as :class:`~..errors.PermissionRefused` naming the rule that grants it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from ..errors import PermissionRefused
from .acl import missing_permissions, store_refusal
from .client import location
from .pending import Store
from .permissions import refused

HOW = "(`celery zset acl --role <role>` prints every rule a role needs: docs/acl.md)"


class Grants:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._asked = False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Raise :class:`PermissionRefused` when the user lacks a rule the scripts need; asked
        once (a cluster, whose keys are in several slots, and a server before Redis 7 cannot be
        asked and are not)."""
        if self._asked:
            return
        with self._lock:
            if self._asked or self.store.clustered:
                self._asked = True
                return
            missing = missing_permissions(self.store.scripts, self.store.keys)
            if missing:
                raise PermissionRefused(
                    f"the store's Redis user at {location(self.store.client)} may not run what the scripts run: "
                    f"grant {' '.join(missing)} {HOW}; nothing was written")
            self._asked = True

    def refused(self, exc: BaseException, doing: str) -> PermissionRefused | None:
        """``exc`` as a :class:`PermissionRefused` when it is Redis refusing a permission (asked
        again before the next write), else None."""
        if isinstance(exc, PermissionRefused):
            return exc
        if not refused(exc):
            return None
        self._asked = False
        what, grant = store_refusal(exc, self.store.keys)
        where = location(self.store.client)
        return PermissionRefused(f"{doing}: the store's Redis user at {where} may not use {what}: grant {grant} {HOW}")

    @contextmanager
    def writing(self, doing: str) -> Iterator[None]:
        """Around a write: the permissions asked first, a refusal raised as :class:`PermissionRefused`
        saying what was ``doing``; other Redis errors pass unchanged."""
        try:
            self.ensure()
            yield
        except redis.RedisError as exc:
            denied = self.refused(exc, doing)
            if denied is not None:
                raise denied from exc
            raise
