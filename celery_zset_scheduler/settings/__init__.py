"""Settings: one frozen object, validated once, read from any mapping-like config.

Every setting is a dataclass field whose metadata carries its documentation and its parser,
so the table in the README, the validation and the defaults cannot drift apart.
Celery keys are the field names prefixed with ``zset_scheduler_`` (Django: ``CELERY_ZSET_SCHEDULER_``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..errors import ConfigurationError
from . import parse as p
from .parse import PREFIX as PREFIX

#: The default largest message a call may store: 64 MiB (Redis itself takes values up to 512 MB).
MAX_MESSAGE_BYTES = 64 << 20
#: The default most stored bytes one claim takes and one publish call sends: 8 MiB.
BATCH_BYTES = 8 << 20


def _opt(default: Any, parse: p.Parser, doc: str, default_doc: str | None = None) -> Any:
    meta = {"parse": parse, "doc": doc, "default_doc": default_doc}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    """Validated ``zset_scheduler_*`` settings. Build it with :meth:`from_config`."""

    url: str | None = _opt(
        None, p.optional_url,
        "Redis URL of the store. AUTH/ACL in the URL and `rediss://` TLS work; `sentinel://host:26379/0` "
        "(several `;`-separated, as Kombu takes them) finds the master through Redis Sentinel.",
        "the broker URL when the broker is Redis (or Sentinel)",
    )
    master_name: str | None = _opt(
        None, p.optional_name,
        "With a `sentinel://` URL: the name of the master the sentinels watch.",
        "the broker's `master_name` transport option",
    )
    sentinel_kwargs: dict[str, Any] = _opt(
        {}, p.options,
        "With a `sentinel://` URL: redis-py options of the connections to the sentinels themselves "
        "(their `password`, TLS...); the URL's password is the master's.",
        "the broker's `sentinel_kwargs` transport option",
    )
    prefix: str = _opt("zset", p.prefix, "Key prefix; shard `s` lives under the hash tag `{prefix:s}`.")
    shards: int = _opt(
        8, p.int_range(1, 16384),
        "Number of shards, recorded when the store is first used: a client started with another count "
        "refuses to start. Change it with `celery zset reshard --to N`.",
    )
    min_countdown: float = _opt(
        0.0, p.seconds(0.0),
        "ETAs closer than this many seconds go straight to the broker as plain Celery ETA messages.",
    )
    batch_size: int = _opt(500, p.int_range(1, 5000), "Most tasks one claim moves from `due` to `inflight`.")
    batch_bytes: int = _opt(
        BATCH_BYTES, p.int_range(64 << 10, 512 << 20),
        "Most stored bytes one claim takes and one publish call sends (with `batch_size`, whichever "
        "comes first). A message bigger than this goes in a batch of its own, after the smaller ones "
        "due with it (at most a second after them), so a few big messages never hold up the rest.",
        "8388608 (8 MiB)",
    )
    lock_timeout: float = _opt(
        10.0, p.seconds(0.3, 3600.0),
        "Lease of a shard leader and of a dispatcher's membership; a dead leader's shards move after it.",
    )
    max_interval: float = _opt(
        5.0, p.seconds(0.0, 3600.0, lo_open=True),
        "Longest a dispatcher sleeps between polls, even with nothing due.",
    )
    claim_interval: float = _opt(
        0.002, p.seconds(0.0, 1.0),
        "Shortest time between two claims while a dispatcher keeps up: more tasks per round trip "
        "and less CPU at moderate rates, for at most this much extra lateness.",
    )
    inflight_timeout: float = _opt(
        30.0, p.seconds(0.1, 86400.0),
        "Lease of a claimed batch; a batch not acked by then (crashed dispatcher) returns to `due`.",
    )
    accept_content: tuple[str, ...] = _opt(
        ("json",), p.names,
        "Serializers whose messages may be stored. Anything but JSON is an explicit opt-in.",
    )
    cluster: str = _opt(
        "auto", p.cluster,
        "Whether the store's Redis is a Redis Cluster: `auto` asks the server (`cluster_enabled` in "
        "`INFO`) when the store is first used, `true`/`false` force it. On a cluster the URL names any node.",
    )
    wait_replicas: int = _opt(
        0, p.int_range(0, 64),
        "Scheduling returns only once this many replicas have the write (Redis `WAIT`); 0: once the "
        "master has it. Not enough replicas in time raises `NotReplicated` (the entry is stored on the master). "
        "Dispatchers hand off nothing from a master with fewer replicas in sync (a master demoted by a "
        "Sentinel failover takes writes until it is reconfigured).",
    )
    wait_timeout: float = _opt(
        1.0, p.seconds(0.001, 3600.0),
        "Longest a schedule waits for `wait_replicas` replicas.",
    )
    redis_options: dict[str, Any] = _opt(
        {}, p.options, "Extra keyword arguments for the redis-py client (timeouts, TLS files...)."
    )
    max_message_bytes: int = _opt(
        MAX_MESSAGE_BYTES, p.int_range(1024, 512 << 20),
        "Largest message (its serialized form, in bytes) a timed call may store: a bigger one raises "
        "`ValueError` naming this setting, and nothing is stored (Redis itself takes values up to 512 MB).",
        "67108864 (64 MiB)",
    )
    idempotency_ttl: float = _opt(
        86400.0, p.seconds(1.0), "How long a finished idempotency key remembers its outcome."
    )
    idempotency_lease: float = _opt(
        60.0, p.seconds(0.5, 86400.0),
        "Lease of a running idempotency key; renewed while the task runs, expires if the worker dies.",
    )
    dead_letters: bool = _opt(
        True, p.bool_,
        "Every task of the app that fails for good (after its last retry, on `Reject(requeue=False)`, "
        "or with a name the worker does not know) goes to the dead-letter store. A task's own "
        "`dead_letter = True/False` wins over this.",
    )
    dlq_max_len: int = _opt(100_000, p.int_range(1, 100_000_000), "Most entries kept in the dead-letter store.")
    dlq_max_age: float = _opt(
        7 * 86400.0, p.seconds(1.0), "Dead letters older than this many seconds are trimmed."
    )
    revoke_ttl: float = _opt(
        86400.0, p.seconds(1.0),
        "How long a revoke of a task no longer pending (in flight, in a queue, running) is kept in "
        "Redis and by installed workers: at least as long as a task can wait in a queue.",
    )
    revoke_max: int = _opt(
        50_000, p.int_range(1, 10_000_000),
        "Most revoke records kept (spread over the shards; the ones closest to expiry go first).",
    )
    amqp_confirms: bool = _opt(
        True, p.bool_,
        "With a RabbitMQ broker (py-amqp), dispatchers publish with publisher confirms, in batches: "
        "a task leaves the store only once RabbitMQ confirmed it. `False`: one Kombu publish a "
        "message, counted when written.",
    )
    broker_transport: bool = _opt(
        True, p.bool_,
        "With a `redis://` broker and no `broker_transport` of the app's own, producers and workers use "
        "this package's Redis transport: Kombu's, with a worker that outlives a broker restart "
        "(docs/guarantees.md). `False`: Kombu's own.",
    )
    fast_path: str = _opt(
        "auto", p.fast_path,
        "`'auto'`: when the broker is the store's own standalone Redis server and database, one Lua "
        "script moves due tasks straight into Kombu's queue lists (never a duplicate, several times the rate); "
        "what it cannot route or rebuild exactly takes the generic path. When the broker is a Redis elsewhere "
        "(another database or server, or a Redis Cluster store), the generic path's claim script builds the "
        "envelopes with the same Lua builder and the dispatcher only forwards them (the generic path's "
        "guarantees; more CPU in the store's Redis, less in the dispatcher: docs/benchmarks.md). "
        "`False`: always the generic path, all of it in Python.",
    )
    internals: str = _opt(
        "auto", p.internals,
        "`'auto'`: the fast paths that read private attributes of redis-py and Kombu are taken where a "
        "check at start-up finds them as expected (otherwise one WARNING names what the public path "
        "costs); `'public'`: public APIs only, in the whole process (docs/design.md#private-internals).",
    )
    metrics_port: int | None = _opt(
        None, p.optional_port, "Serve Prometheus metrics from each dispatcher on this port (0: any free port)."
    )
    metrics_addr: str = _opt("127.0.0.1", p.host, "Address the metrics server binds to.")
    periodic_overlap_timeout: float = _opt(
        3600.0, p.seconds(1.0),
        "Periodic entries with `overlap` `skip`/`buffer_one`: an occurrence handed to the broker counts as "
        "running until a worker reports its end, or at most this long (a lost message cannot hold its entry).",
    )
    collect_interval: float = _opt(
        3600.0, p.seconds(0.0, 30 * 86400.0),
        "Least time between two collections of a shard's shared prefixes, which its leader runs a step a "
        "heartbeat: a prefix no pending task refers to is deleted after two (each producer process writes "
        "its own, so restarts leave old ones). Also how long one producer pipeline may stall before its "
        "entry could lose its prefix (docs/design.md). 0: never collect. Needs `INFO` (ACL `@dangerous`).",
    )

    @property
    def heartbeat_interval(self) -> float:
        """How often leases and membership are refreshed: well inside the lease."""
        return min(1.0, self.lock_timeout / 3.0)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The full Celery setting names, in declaration order."""
        return tuple(PREFIX + f.name for f in fields(cls))

    @classmethod
    def from_config(
        cls, get: Callable[[str], Any], present: Iterable[str], **overrides: Any
    ) -> Settings:
        """Read and validate every setting.

        ``get(name)`` returns a setting's value or None; ``present`` lists the configuration's
        own key names so that a misspelt ``zset_scheduler_*`` key is refused, not ignored.
        """
        known = {f.name for f in fields(cls)}
        for raw in present:
            name = _setting_name(raw)
            if name is not None and name not in known:
                hint = difflib.get_close_matches(name, known, n=1)
                suggestion = f"; did you mean {_spelt_like(raw, name, hint[0])}?" if hint else ""
                raise ConfigurationError(f"unknown setting {raw!r}{suggestion}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = overrides.get(f.name, get(PREFIX + f.name))
            if value is not None:
                values[f.name] = f.metadata["parse"](f.name, value)
        return cls(**values)

    @classmethod
    def documentation(cls) -> list[tuple[str, str, str]]:
        """``(setting, default, description)`` rows for the README's table."""
        rows = []
        for f in fields(cls):
            if f.metadata["default_doc"]:
                shown = str(f.metadata["default_doc"])
            elif f.default_factory is not MISSING:
                shown = repr(f.default_factory())
            else:
                shown = repr(f.default)
            rows.append((PREFIX + f.name, shown, str(f.metadata["doc"])))
        return rows


def _setting_name(raw: str) -> str | None:
    """The field name a configuration key refers to, or None when it is not ours."""
    key = raw.lower()
    for namespace in ("", "celery_"):
        if key.startswith(namespace + PREFIX):
            return key[len(namespace) + len(PREFIX):]
    return None


def _spelt_like(raw: str, name: str, hint: str) -> str:
    """``hint`` as the full key ``raw`` meant: same namespace (Django's ``CELERY_``) and case."""
    namespace = raw[: len(raw) - len(PREFIX) - len(name)]
    full = namespace + PREFIX + hint
    return full.upper() if namespace and namespace.isupper() else full
