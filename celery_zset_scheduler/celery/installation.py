"""The per-app state of an installed app: settings, store and dead letters, created on first use."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from ..config import Settings
from ..connection import make_client
from ..deadletter import DeadLetter, DeadLetters
from ..idempotency import IdempotencyKeys
from ..keys import KeySpace
from ..store import Store
from .settings import read_settings

_installations: weakref.WeakKeyDictionary[Any, Installation] = weakref.WeakKeyDictionary()


class Installation:
    """Lazy: nothing connects, reads configuration or starts a thread until it is used."""

    def __init__(self, app: Any, overrides: dict[str, Any]) -> None:
        self.app = app
        self.overrides = overrides
        self._lock = threading.RLock()
        self._settings: Settings | None = None
        self._store: Store | None = None
        self._dead_letters: DeadLetters | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            with self._lock:
                if self._settings is None:
                    self._settings = read_settings(self.app, **self.overrides)
        return self._settings

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    s = self.settings
                    client = make_client(str(s.url), s.redis_options)
                    self._store = Store(client, KeySpace(s.prefix, s.shards))
        return self._store

    @property
    def dead_letters(self) -> DeadLetters:
        if self._dead_letters is None:
            with self._lock:
                if self._dead_letters is None:
                    s, store = self.settings, self.store
                    self._dead_letters = DeadLetters(
                        store.client, store.keys, max_len=s.dlq_max_len, max_age=s.dlq_max_age,
                        scripts=store.scripts, on_add=self._announce,
                    )
        return self._dead_letters

    @property
    def idempotency(self) -> IdempotencyKeys:
        store = self.store
        return IdempotencyKeys(store.client, store.keys, store.scripts)

    def _announce(self, letter: DeadLetter) -> None:
        from .signals import task_dead_lettered

        task_dead_lettered.send(sender=self.app, letter=letter)

    def reset(self) -> None:
        """Forget clients (after fork, or when settings change in tests); settings are re-read."""
        with self._lock:
            self._settings = None
            self._store = None
            self._dead_letters = None


def installation_for(app: Any) -> Installation | None:
    return _installations.get(app)


def ensure_installation(app: Any, overrides: dict[str, Any] | None = None) -> Installation:
    inst = _installations.get(app)
    if inst is None:
        inst = _installations[app] = Installation(app, dict(overrides or {}))
    elif overrides:
        inst.overrides.update(overrides)
        inst.reset()
    return inst


def _after_fork_in_child() -> None:
    # redis-py pools already refuse connections inherited from the parent; dropping the clients
    # also drops locks a parent thread may have held at fork time.
    for inst in list(_installations.values()):
        inst._lock = threading.RLock()
        inst._store = None
        inst._dead_letters = None


os.register_at_fork(after_in_child=_after_fork_in_child)
