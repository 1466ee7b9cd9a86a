"""Run-time idempotency keys: at most one completed execution per key while its record lives (I6).

A key is acquired with a lease before the body runs and the lease is renewed while it runs, so a
worker killed mid-task leaves a lease that simply expires; a redelivery then runs the body. Success
records the outcome for ``ttl``; a failure releases the key (or keeps it failed, if asked).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Literal

from .events import log_event
from .keys import KeySpace
from .scripts import Scripts


@dataclass(frozen=True)
class Acquired:
    state: Literal["acquired", "done", "failed", "running"]
    outcome: Any = None  # the recorded outcome for done/failed
    holder: str = ""  # who runs it, for running
    retry_in: float = 0.0  # seconds until the holder's lease expires, for running


class IdempotencyKeys:
    """The idempotency records of one store prefix."""

    def __init__(self, client: Any, keys: KeySpace, scripts: Scripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts or Scripts(client)

    def acquire(self, key: str, owner: str, lease: float) -> Acquired:
        reply = self.scripts.idem_acquire([self.keys.idempotency(key)], [owner, _ms(lease)])
        state = reply[0].decode()
        if state == "acquired":
            return Acquired("acquired")
        if state == "running":
            ttl_ms = max(0, int(reply[2]))
            return Acquired("running", holder=reply[1].decode(), retry_in=ttl_ms / 1000.0)
        return Acquired(state, outcome=_loads(reply[1]))

    def renew(self, key: str, owner: str, lease: float) -> bool:
        return bool(self.scripts.idem_renew([self.keys.idempotency(key)], [owner, _ms(lease)]))

    def finish(self, key: str, owner: str, outcome: Any, ttl: float, *, failed: bool = False) -> bool:
        state = "failed" if failed else "done"
        args = [owner, state, json.dumps(outcome, default=repr), _ms(ttl)]
        return bool(self.scripts.idem_finish([self.keys.idempotency(key)], args))

    def release(self, key: str, owner: str) -> bool:
        return bool(self.scripts.idem_release([self.keys.idempotency(key)], [owner]))

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
                log_event(logging.WARNING, "idempotency.renew_failed", key=self.key, error=repr(exc))


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")
