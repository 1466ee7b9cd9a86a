"""Syncing ``beat_schedule`` into the store when a dispatcher starts.

The entries of ``beat_schedule`` (and the ones Celery beat adds by itself) are written as periodic
entries: new ones added, changed ones updated (their run history kept, and what operators switched
at run time: enabled, paused), the ones no longer configured removed. Entries created at run time
(the API, the CLI, an import) are never touched. Which entries came from the configuration, and
with what fingerprint (definition + message), is kept in one index hash; a sync reads that index
and writes only what differs, so a restart with the same configuration writes nothing, and nothing
here ever reads the whole store.

Two dispatchers starting together with different configurations: syncs are serialised by a lock
(``{prefix:periodic}:sync``, a lease), so configurations never mix; the one that syncs last wins,
wholly: the store ends with exactly its ``beat_schedule``. (Every dispatcher start syncs, so the
last one started defines the configured entries, as the last Celery beat started would run its own.)
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...model.logs import log_event
from ...model.periodic import PeriodicEntry
from ...store.periodic import PeriodicStore
from ..core.state import ensure_installation
from . import runtime as api
from .entries import Templates, fingerprint

#: The sync lock's lease: far longer than a sync of a big beat_schedule takes.
SYNC_LEASE_MS = 60_000


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def sync(app: Any, entries: Sequence[PeriodicEntry]) -> SyncReport | None:
    """Make the configured entries ``entries`` (normalised, from :func:`.periodic_entries.config_entries`);
    None when another dispatcher is syncing (try again)."""
    ps = PeriodicStore(ensure_installation(app).store)
    token = secrets.token_hex(16)
    if not ps.lock_sync(token, SYNC_LEASE_MS):
        return None
    try:
        return _sync(app, ps, entries)
    finally:
        ps.unlock_sync(token)


def _sync(app: Any, ps: PeriodicStore, entries: Sequence[PeriodicEntry]) -> SyncReport:
    report = SyncReport()
    index = dict(ps.config_index())
    present = ps.records([e.name for e in entries])
    templates = Templates(app)
    for entry in entries:
        template = templates.build(entry)
        mark = fingerprint(entry, template)
        if index.get(entry.name) == mark and present[entry.name][0] is not None:
            report.unchanged.append(entry.name)
            continue
        status = api.upsert(app, entry, template, keep_switches=True)
        (report.added if status == "added" else report.updated if status == "updated" else report.unchanged).append(
            entry.name)
        ps.set_config(entry.name, mark)
    configured = {e.name for e in entries}
    for name in sorted(set(index) - configured):
        api.remove(app, name)
        ps.set_config(name, None)
        report.removed.append(name)
    return report


def preparer(app: Any, entries: Sequence[PeriodicEntry]) -> Any:
    """The planner's ``prepare``: sync once, True when done."""

    def prepare() -> bool:
        report = sync(app, entries)
        if report is None:
            log_event(logging.INFO, "periodic.sync_waits", reason="another_dispatcher_is_syncing")
            return False
        log_event(logging.INFO, "periodic.synced", added=len(report.added), updated=len(report.updated),
                  removed=len(report.removed), unchanged=len(report.unchanged))
        return True

    return prepare
