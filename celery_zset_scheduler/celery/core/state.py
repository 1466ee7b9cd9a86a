"""The per-app state of an installed app: its settings, store and dead letters, made on first use."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from ...errors import ConfigurationError
from ...model import internals
from ...model.keys import KeySpace
from ...model.letters import DeadLetter
from ...model.urls import is_sentinel_url
from ...settings import Settings
from ...store.client import make_client
from ...store.deadletters import DeadLetters
from ...store.grants import Grants
from ...store.idempotency import IdempotencyKeys
from ...store.pending import Store

_installations: weakref.WeakKeyDictionary[Any, Installation] = weakref.WeakKeyDictionary()


def read_settings(app: Any, **overrides: Any) -> Settings:
    """Validate the app's ``zset_scheduler_*`` settings (Django's ``CELERY_`` namespace too)."""
    conf = app.conf
    settings = Settings.from_config(conf.get, list(conf.keys()), **overrides)
    defaults: dict[str, Any] = {}
    if settings.url is None:
        url = broker_redis_url(app)
        if url is None:
            raise ConfigurationError(
                "zset_scheduler_url is required: the broker is not Redis "
                f"({_scheme(conf.broker_url)!r}), so there is no Redis to default to"
            )
        # A TLS broker's certificate settings are the store's too (same names in redis-py).
        tls = conf.broker_use_ssl if isinstance(conf.broker_use_ssl, dict) else {}
        # Through Sentinel redis-py takes TLS as ssl=True (Kombu sets its connection class).
        ssl = {"ssl": True} if conf.broker_use_ssl and is_sentinel_url(url) else {}
        defaults = {"url": url, "redis_options": {**ssl, **tls, **settings.redis_options}}
    if is_sentinel_url(str(defaults.get("url", settings.url))):
        # The broker's Sentinel options serve the store on the same sentinels: install(app) stays
        # the one line a Sentinel user writes.
        options = conf.broker_transport_options or {}
        if settings.master_name is None and options.get("master_name"):
            defaults["master_name"] = options["master_name"]
        if not settings.sentinel_kwargs and options.get("sentinel_kwargs"):
            defaults["sentinel_kwargs"] = options["sentinel_kwargs"]
    if defaults:
        settings = Settings.from_config(conf.get, [], **{**overrides, **defaults})
    return settings


def broker_redis_url(app: Any) -> str | None:
    """The broker URL when it is a Redis one (first of a failover list; every sentinel of a
    Sentinel list), in redis-py's form."""
    url = app.conf.broker_write_url or app.conf.broker_url
    if isinstance(url, (list, tuple)):
        if url and all(is_sentinel_url(str(u)) for u in url):
            return ";".join(str(u).strip() for u in url)
        url = url[0] if url else None
    if not url:
        return None
    if is_sentinel_url(str(url)):
        return ";".join(part.strip() for part in str(url).split(";") if part.strip())
    url = str(url).split(";")[0].strip()
    if url.startswith(("redis://", "rediss://")):
        return url
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://"):]
    return None


def _scheme(url: Any) -> str:
    text = str(url or "amqp://")
    return text.split("://", 1)[0] if "://" in text else text


class Installation:
    """Lazy: nothing connects, reads configuration or starts a thread until it is used."""

    def __init__(self, app: Any, overrides: dict[str, Any]) -> None:
        self.app = app
        self.overrides = overrides
        self._lock = threading.RLock()
        self._settings: Settings | None = None
        self._store: Store | None = None
        self._dead_letters: DeadLetters | None = None
        self._grants: Grants | None = None
        self.per_thread = threading.local()  # what a thread keeps for this app (timed.idle_producer)
        self.lane: Any = None  # the send_task wrapper's lane (.lane), made on the first timed send
        self.event_dispatcher: Any = None  # of task-sent events (.sender), made on the first one

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            with self._lock:
                if self._settings is None:
                    settings = read_settings(self.app, **self.overrides)
                    if settings.internals == "public":
                        internals.force_public(f"zset_scheduler_internals='public' in app {self.app.main!r}")
                    internals.check_all()
                    self._settings = settings
        return self._settings

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._lock:
                if self._store is None:
                    s = self.settings
                    client = make_client(str(s.url), s.redis_options, s.cluster, master_name=s.master_name,
                                         sentinel_kwargs=s.sentinel_kwargs)
                    wait = (s.wait_replicas, int(s.wait_timeout * 1000))
                    self._store = Store(client, KeySpace(s.prefix, s.shards), wait, s.max_message_bytes)
        return self._store

    @property
    def grants(self) -> Grants:
        """Whether the store's user may write, asked before the first write (store/grants.py)."""
        if self._grants is None:
            with self._lock:
                if self._grants is None:
                    self._grants = Grants(self.store)
        return self._grants

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
            self._grants = None


def installation_for(app: Any) -> Installation | None:
    return _installations.get(app)


def installed_conf(conf: Any) -> bool:
    """Whether ``conf`` is the configuration of an installed app (the object ``app.conf`` is now)."""
    return any(getattr(app, "_conf", None) is conf for app in list(_installations.keys()))


def installed_apps() -> list[Any]:
    """The apps that have an installation in this process (for front ends that must find one)."""
    return list(_installations.keys())


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
        inst._grants = None


os.register_at_fork(after_in_child=_after_fork_in_child)
