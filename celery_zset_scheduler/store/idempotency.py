"""Run-time idempotency keys: at most one completed execution per key while its record lives (I6).

A key is acquired with a lease before the body runs and the lease is renewed while it runs, so a
worker killed mid-task leaves a lease that simply expires; a redelivery then runs the body. Success
records the outcome for ``ttl``; a failure releases the key (or keeps it failed, if asked).

A lease cannot stop a process paused past it (a long GC, SIGSTOP, a VM migration) from resuming
and finishing while a redelivery runs too. Each acquisition therefore gets a fencing token that
increases with every acquisition of the key, for the body to hand to the systems it writes to
(so they can refuse a stale writer); a completion whose lease was lost is reported by
:meth:`IdempotencyKeys.finish` and counted in the ``{prefix}:stats`` hash.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Literal

from ..model.keys import KeySpace
from ..model.logs import describe, log_event
from .scripts import Call, ScriptDef, Scripts, as_bool, scripts_for

IDEM_ACQUIRE = ScriptDef("idem_acquire", ("record",))
IDEM_RENEW = ScriptDef("idem_renew", ("record",))
IDEM_FINISH = ScriptDef("idem_finish", ("record",))
IDEM_RELEASE = ScriptDef("idem_release", ("record",))


#: Field of the ``{prefix}:stats`` hash: completions whose lease was lost (finished anyway).
LEASE_LOST_COMPLETIONS = "idempotency_lease_lost_completions"


@dataclass(frozen=True)
class Acquired:
    state: Literal["acquired", "done", "failed", "running"]
    outcome: Any = None  # the recorded outcome for done/failed
    holder: str = ""  # who runs it, for running
    retry_in: float = 0.0  # seconds until the holder's lease expires, for running
    token: int = 0  # the fencing token of this acquisition, for acquired


Finished = Literal["held", "lapsed", "overtaken"]
_FINISHED: dict[int, Finished] = {1: "held", 2: "lapsed", 0: "overtaken"}


def _acquired(reply: Any) -> Acquired:
    state = reply[0].decode()
    if state == "acquired":
        return Acquired("acquired", token=int(reply[1]))
    if state == "running":
        return Acquired("running", holder=reply[1].decode(), retry_in=max(0, int(reply[2])) / 1000.0)
    return Acquired(state, outcome=_loads(reply[1]))


class IdempotencyKeys:
    """The idempotency records of one store prefix."""

    def __init__(self, client: Any, keys: KeySpace, scripts: Scripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts or scripts_for(client)

    def _record(self, key: str) -> tuple[str]:
        return (self.keys.idempotency(key),)

    def acquire(self, key: str, owner: str, lease: float) -> Acquired:
        call: Call[Acquired] = IDEM_ACQUIRE.call_with(self._record(key), [owner, _ms(lease)], _acquired)
        return self.scripts.run(call)

    def renew(self, key: str, owner: str, lease: float) -> bool:
        return self.scripts.run(IDEM_RENEW.call_with(self._record(key), [owner, _ms(lease)], as_bool))

    def finish(self, key: str, owner: str, outcome: Any, ttl: float, *, token: int = 0,
               failed: bool = False) -> Finished:
        """Record the outcome: ``held`` (under this owner's lease), ``lapsed`` (recorded, but the
        lease had expired first) or ``overtaken`` (another delivery holds or finished the key: not
        recorded). Anything but ``held`` means another delivery may have run the body too."""
        args = [owner, "failed" if failed else "done", json.dumps(outcome, default=repr), _ms(ttl), int(token)]
        return self.scripts.run(IDEM_FINISH.call_with(self._record(key), args, lambda r: _FINISHED[int(r)]))

    def count_lease_lost(self) -> int:
        """Count a completion whose lease was lost in ``{prefix}:stats``; the new total."""
        return int(self.client.hincrby(self.keys.stats, LEASE_LOST_COMPLETIONS, 1))

    def release(self, key: str, owner: str) -> bool:
        return self.scripts.run(IDEM_RELEASE.call_with(self._record(key), [owner], as_bool))

    def state(self, key: str) -> dict[str, str]:
        raw = self.client.hgetall(self.keys.idempotency(key))
        return {k.decode(): v.decode() for k, v in raw.items()}


class LeaseKeeper:
    """Renews a running key's lease from a background thread until stopped."""

    def __init__(self, keys: IdempotencyKeys, key: str, owner: str, lease: float) -> None:
        self.keys, self.key, self.owner, self.lease = keys, key, owner, lease
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, name=f"zset-lease:{key}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.lease / 3.0):
            try:
                if not self.keys.renew(self.key, self.owner, self.lease):
                    self.lost = True
                    log_event(logging.WARNING, "idempotency.lease_lost", key=self.key, owner=self.owner)
                    return
            except Exception as exc:  # a Redis blip: try again next time, the lease has slack
                log_event(logging.WARNING, "idempotency.renew_failed", key=self.key, error=describe(exc))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")
