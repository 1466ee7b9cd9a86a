"""The dispatcher's periodic step: fire the due periodic entries of the shards it leads (I11).

The loop calls :meth:`PeriodicStep.run` once per pass, before its claim. For every led shard whose
periodic look is due, the step reads the due entries (one fenced script per shard, pipelined),
asks the :class:`PeriodicPlanner` what to do with each, and writes the answer (one fenced
compare-and-set script per shard and chunk, pipelined): each due occurrence becomes an ordinary
task in the shard's ``due`` with a deterministic id, written together with the entry's next state,
and the claim of the same pass hands it over like any stored task.

The planner is the seam to Celery (this layer may not import it): it computes fire times with
Celery's schedule classes and applies the model's rules (:mod:`..model.firing`). The occurrences'
message is the template stored with the entry when it was written (built by Celery then), so the
step only supplies the id, and the ``expires`` header of entries with ``expire_seconds``.

A dispatcher touches only due entries: per pass at most ``batch_size`` per shard, found through
the shard's ``next`` ZSET (I4); between looks it sleeps until the earliest next look (at most
``max_interval``), and a change that makes an entry due earlier publishes ``p<shard>``.

A full store (``noeviction`` at ``maxmemory``) refuses the step's writes: occurrences are new
tasks, refused like any new schedule. The step then waits a heartbeat and tries again, without
holding up the claim that drains the store; once there is room the occurrences fire, late, as
the entries' policies say (on time within twice the lock timeout, else caught up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import redis

from ..errors import PoisonMessage
from ..model.codec import decode, encode
from ..model.logs import log_event
from ..model.periodic import ms_to_iso
from ..store.claims import Fence
from ..store.periodic import DueEntry, DueRead, Firing, PeriodicStore
from .config import DispatcherConfig
from .leadership import Lease

COALESCE_S = 0.005  # shards whose look is due within this are read in the same round trip
PREPARE_RETRY_S = 0.25  # how soon an unfinished prepare (another dispatcher syncing) is tried again


@dataclass(frozen=True)
class Planned:
    """A planner's answer for one entry; ``expires_ms``: the ``expires`` header (epoch ms) of the
    occurrences (by id) whose template must get one (entries with ``expire_seconds``)."""

    firing: Firing
    expires_ms: Mapping[str, int] = field(default_factory=dict)


class PeriodicPlanner(Protocol):
    #: How long a handed-over occurrence counts as running without a report of its end (ms).
    overlap_timeout_ms: int

    def prepare(self) -> bool:
        """Run before the first look (the ``beat_schedule`` sync) until it returns True (False:
        not possible yet, another dispatcher is syncing); a Redis error is raised and the loop
        calls it again after the outage."""
        ...

    def plan(self, entries: Sequence[DueEntry], now_ms: int) -> list[Planned]:
        """One answer per entry (Redis time ``now_ms``). An entry it cannot read must still get an
        answer (keep its state, look again later), never an exception."""
        ...


@dataclass(frozen=True)
class PeriodicEnv:
    periodic: PeriodicStore
    config: DispatcherConfig
    lease_valid: Callable[[int, float], bool]  # (shard, monotonic now): still safely ours


@dataclass(frozen=True)
class PeriodicPass:
    fenced: frozenset[int] = frozenset()  # shards whose lease turned out to be lost
    stored: frozenset[int] = frozenset()  # shards that got occurrences: claim them now


class PeriodicStep:
    def __init__(self, env: PeriodicEnv, planner: PeriodicPlanner) -> None:
        self.env = env
        self.planner = planner
        self.periodic = env.periodic
        self._look: dict[int, float] = {}  # shard -> monotonic time of its next look
        self._fences: dict[int, Fence] = {}
        self._prepared = False
        self._prepare_at = 0.0
        self._deferred = False  # the store is full: logged once until it takes writes again

    # -- the loop's interface -------------------------------------------------------------------

    def run(self, owned: Mapping[int, Lease]) -> PeriodicPass:
        try:
            done = self._run(owned)
        except redis.OutOfMemoryError as exc:
            if not self._deferred:
                log_event(logging.WARNING, "periodic.deferred", reason="store_full", error=str(exc))
            self._deferred = True
            later = time.monotonic() + self.env.config.heartbeat_interval
            self._prepare_at = later
            self._look = {shard: max(at, later) for shard, at in self._look.items()}
            return PeriodicPass()
        self._deferred = False
        return done

    def _run(self, owned: Mapping[int, Lease]) -> PeriodicPass:
        now = time.monotonic()
        if not self._prepared:
            if now < self._prepare_at:
                return PeriodicPass()
            self._prepared = self.planner.prepare()
            if not self._prepared:
                self._prepare_at = now + PREPARE_RETRY_S
                return PeriodicPass()
        for shard in [s for s in self._fences if s not in owned]:
            self._fences.pop(shard, None)
            self._look.pop(shard, None)
        fences: list[Fence] = []
        for shard, lease in sorted(owned.items()):
            if self._fences.get(shard) != lease.fence:  # newly led: look at once
                self._fences[shard] = lease.fence
                self._look[shard] = 0.0
            if self._look[shard] > now + COALESCE_S:
                continue
            if self.env.lease_valid(shard, now):
                fences.append(lease.fence)
            else:  # not renewed lately: the heartbeat decides first
                self._look[shard] = now + self.env.config.heartbeat_interval
        if not fences:
            return PeriodicPass()
        return self._look_at(fences)

    def deadline(self) -> float | None:
        """When the next look is due (monotonic), or None when no shard is led."""
        if not self._prepared:
            return self._prepare_at
        return min(self._look.values()) if self._look else None

    def on_wake(self, data: Any) -> bool:
        """A ``p<shard>`` wake-up: look at that shard now, if we lead it."""
        text = data.decode() if isinstance(data, bytes) else str(data)
        if not text.startswith("p"):
            return False
        try:
            shard = int(text[1:])
        except ValueError:
            return False
        if shard not in self._fences:
            return False
        self._look[shard] = 0.0
        return True

    # -- one look -------------------------------------------------------------------------------

    def _look_at(self, fences: list[Fence]) -> PeriodicPass:
        config = self.env.config
        sent_at = time.monotonic()
        reads = self.periodic.due_many(
            fences, limit=config.batch_size, max_wait_ms=int(config.max_interval * 1000),
            wake_ttl_ms=int((config.max_interval + config.lock_timeout) * 1000),
            overlap_timeout_ms=self.planner.overlap_timeout_ms,
        )
        fenced: set[int] = set()
        plans: dict[Fence, list[Firing]] = {}
        for fence in fences:
            read = reads[fence.shard]
            if isinstance(read, Exception):  # its master is down (a cluster): look again later
                self._look[fence.shard] = time.monotonic() + config.heartbeat_interval
                continue
            if read.fenced:
                fenced.add(fence.shard)
                continue
            firings = self._with_expiry(fence.shard, self.planner.plan(read.entries, read.now_ms)) \
                if read.entries else []
            self._plan_look(fence.shard, read, firings, sent_at)
            if firings:
                plans[fence] = firings
        stored: set[int] = set()
        if plans:
            written = self.periodic.fire_many(plans)
            for fence in plans:
                results = written.get(fence.shard)
                if results is None:
                    fenced.add(fence.shard)
                    continue
                if any(r < 0 for r in results):
                    self._look[fence.shard] = 0.0  # changed meanwhile: read it again at once
                if any(r > 0 for r in results):
                    stored.add(fence.shard)
        for shard in fenced:
            self._fences.pop(shard, None)
            self._look.pop(shard, None)
        return PeriodicPass(frozenset(fenced), frozenset(stored))

    def _plan_look(self, shard: int, read: DueRead, firings: Sequence[Firing], sent_at: float) -> None:
        config = self.env.config
        if len(read.entries) >= config.batch_size:
            self._look[shard] = 0.0
            return
        looks = [f.look_ms for f in firings if f.look_ms is not None]
        if read.next_look_ms is not None:
            looks.append(read.next_look_ms)
        wait = config.max_interval
        if looks:
            wait = min(wait, max(0, min(looks) - read.now_ms) / 1000.0)
        # From when the read was sent: an estimate that errs early costs an empty read only.
        self._look[shard] = sent_at + wait

    def _with_expiry(self, shard: int, planned: Sequence[Planned]) -> list[Firing]:
        """The firings, with the ``expires`` header set on the occurrences that need one."""
        needing = [p.firing.name for p in planned if p.expires_ms]
        if not needing:
            return [p.firing for p in planned]
        templates = self.periodic.templates(shard, needing)
        out = []
        for p in planned:
            template = templates.get(p.firing.name)
            if not p.expires_ms or template is None:
                out.append(p.firing)
                continue
            occurrences = []
            for o in p.firing.occurrences:
                expires = p.expires_ms.get(o.task_id)
                try:
                    payload = None if expires is None else encode(
                        decode(o.task_id, template).with_headers(expires=ms_to_iso(expires)))
                except PoisonMessage:
                    payload = None  # stored as it is: the claim dead-letters it with the reason
                occurrences.append(replace(o, payload=payload))
            out.append(replace(p.firing, occurrences=occurrences))
        return out


def periodic_step(planner: PeriodicPlanner) -> Callable[[PeriodicEnv], PeriodicStep]:
    """The factory a dispatcher calls with its environment."""
    return lambda env: PeriodicStep(env, planner)


PeriodicFactory = Callable[[PeriodicEnv], PeriodicStep]
