"""Values many entries of a shard share, stored once per shard and referred to from each entry.

Every message one producer sends for one task and queue begins with the same bytes: layout 5 of
the codec (as 4 did) puts the task name, ``origin``, ``reply_to``, ``delivery_mode`` and routing key first
(:func:`~..model.codec.shared_length`), ~70 bytes a task in the benchmark, more with real host names.
Since format 4 the store keeps that prefix once per shard in the HASH ``{prefix:s}:shared``, under
the first 8 bytes of its BLAKE2b digest, and an entry's value (after its arrival stamp) is
``\\x02`` + those 8 bytes + the rest of the encoding. Readers (claim, get, page) put the prefix back
before anything decodes the entry, so nothing above the store sees the difference.

Writes: the prefix is written with ``HSETNX`` in the same round trip as, and before, every
schedule call that refers to it, so a store that lost it (a restart without persistence, a
flushed database) gets it back with the next entry that needs it. The first time a process uses
an id in a shard it checks the stored prefix is its own: a different one (a digest collision,
about 2^-64 per pair) makes that prefix be written inline instead, as a value of its own.

Prefixes are not deleted with entries: one per producer process, task and queue in each shard it
writes to (~150 bytes each, Redis overhead included). The collection of :mod:`.shared_gc` deletes
the ones no stored value refers to; while it runs, a prefix may be in ``shared_old`` or
``shared_grave`` instead, and readers look there too.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..model.codec import shared_length
from ..model.keys import KeySpace
from .scripts import ScriptDef, Scripts, scripts_for
from .values import STAMP_BYTES

MARKER = 0x02
ID_BYTES = 8
#: Shorter prefixes are kept inline: the reference (9 bytes) would save too little.
MIN_SHARED = 24
#: Prefixes kept in memory per process (either way); past it the caches start over.
CACHE_LIMIT = 4096

READ = ScriptDef("read_shared", ("shared", "shared_old", "shared_grave"))


def ident(prefix: bytes) -> bytes:
    """The id of a shared prefix: the first bytes of its digest (the same in every process)."""
    return hashlib.blake2b(prefix, digest_size=ID_BYTES).digest()


def reference(value: bytes) -> bytes | None:
    """The id a stored value (its stamp taken off) refers to, or None for an inline one."""
    if value[:1] == b"\x02" and len(value) > ID_BYTES:
        return value[1:1 + ID_BYTES]
    return None


class Shared:
    """One store client's view of the shards' shared prefixes: compacting values to write and
    expanding values read. Thread-safe; the caches are content-addressed, so they stay right
    after a fork and across stores of one client."""

    def __init__(self, client: Any, keys: KeySpace | Callable[[], KeySpace]) -> None:
        self.client = client
        self._keys = keys
        self._ids: dict[bytes, bytes] = {}  # prefix -> id
        self._prefixes: dict[bytes, bytes] = {}  # id -> prefix, for reading
        self._checked: set[tuple[int, bytes]] = set()  # (shard, id) found to hold our prefix
        self._refused: set[bytes] = set()  # ids whose slot holds another prefix somewhere
        self._last = b"\x00"  # the prefix of the last value compacted (bulk: the same for every task)
        self._scripts: Scripts | None = None
        self._lock = threading.Lock()

    @property
    def keys(self) -> KeySpace:
        """The store's keys now (a store follows a reshard's new shard count)."""
        return self._keys() if callable(self._keys) else self._keys

    # -- writing --------------------------------------------------------------------------------

    def compact(self, shard: int, payload: bytes) -> tuple[bytes, tuple[str, bytes, bytes] | None]:
        """The value to store for ``payload`` in ``shard``, and the ``(key, id, prefix)`` to write
        with ``HSETNX`` before it (None: stored inline)."""
        last = self._last
        # The prefix is self-delimiting: a value that starts with the last one has the same cut.
        cut = len(last) if payload.startswith(last) else shared_length(payload)
        if cut < MIN_SHARED:
            return payload, None
        prefix = payload[:cut]
        self._last = prefix
        sid = self._ids.get(prefix)
        if sid is None:
            sid = ident(prefix)
            with self._lock:
                if len(self._ids) >= CACHE_LIMIT:
                    self._ids.clear()
                self._ids[prefix] = sid
        if sid in self._refused:
            return payload, None
        key = self.keys.shard(shard).shared
        if (shard, sid) not in self._checked and not self._check(shard, key, sid, prefix):
            return payload, None
        return b"\x02" + sid + payload[cut:], (key, sid, prefix)

    def _check(self, shard: int, key: str, sid: bytes, prefix: bytes) -> bool:
        """Write the prefix if missing and check the slot holds it (once per process and shard)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hsetnx(key, sid, prefix)
        pipe.hget(key, sid)
        _, stored = pipe.execute()
        with self._lock:
            if stored is not None and bytes(stored) != prefix:
                self._refused.add(sid)
                return False
            if len(self._checked) >= CACHE_LIMIT:
                self._checked.clear()
            self._checked.add((shard, sid))
            self._remember(sid, prefix)
        return True

    # -- reading --------------------------------------------------------------------------------

    def expand(self, value: bytes) -> bytes | None:
        """The full encoding of a stored value (stamp taken off) from the cache; None when it
        refers to a prefix not cached yet (:meth:`load` it)."""
        sid = reference(value)
        if sid is None:
            return value
        prefix = self._prefixes.get(sid)
        return None if prefix is None else prefix + value[1 + ID_BYTES:]

    def load(self, wanted: Iterable[tuple[int, bytes]]) -> None:
        """Fetch the prefixes of ``(shard, value)`` pairs not cached, in one round trip."""
        by_shard: dict[int, set[bytes]] = {}
        for shard, value in wanted:
            sid = reference(value)
            if sid is not None and sid not in self._prefixes:
                by_shard.setdefault(shard, set()).add(sid)
        if not by_shard:
            return
        asked = [(shard, sorted(ids)) for shard, ids in by_shard.items()]
        for (_, ids), found in zip(asked, self._read(asked), strict=True):
            for sid, prefix in zip(ids, found, strict=True):
                if prefix and ident(bytes(prefix)) == sid:
                    with self._lock:
                        self._remember(sid, bytes(prefix))

    def _read(self, asked: list[tuple[int, list[bytes]]]) -> list[list[Any]]:
        """The prefix of each id of each shard (None: none), from ``shared``, ``shared_old`` or
        ``shared_grave`` (while a collection runs a prefix may wait in the last two:
        store/shared_gc.py), a shard's three read by one script: a collection step run between
        two separate reads could move a prefix out of a hash not read yet into one already read."""
        if self._scripts is None:
            self._scripts = scripts_for(self.client)
        keys = self.keys
        return self._scripts.run_many([READ.call(keys.shard(shard), ids, list) for shard, ids in asked])

    def resolve(self, shard: int, values: list[bytes | None]) -> list[bytes | None]:
        """Every value of ``shard`` expanded (one round trip for the prefixes not cached). A value
        whose prefix the store does not have is returned as stored: decoding it then fails, and
        the entry is dead-lettered like any undecodable one."""
        out = [None if v is None else self.expand(v) for v in values]
        missing = [(shard, v) for v, o in zip(values, out, strict=True) if v is not None and o is None]
        if missing:
            self.load(missing)
            out = [None if v is None else (self.expand(v) or v) for v in values]
        return out

    def inline(self, shard: int, value: bytes) -> bytes:
        """A stored value of ``shard`` (arrival stamp included) with its shared prefix put back:
        what a move to another shard must carry, since the prefix lives in the old shard."""
        at = STAMP_BYTES if value[:1] == b"\x01" and len(value) >= STAMP_BYTES else 0
        if reference(value[at:]) is None:
            return value
        return value[:at] + (self.resolve(shard, [value[at:]])[0] or value[at:])

    def prefix_of(self, shard: int, value: bytes) -> tuple[bytes, bytes] | None:
        """``(id, prefix)`` a stored value of ``shard`` (stamp included) refers to, None for an
        inline value or a prefix the shard does not have: what a move must write first in the
        entry's new shard, so the value moves byte for byte."""
        at = STAMP_BYTES if value[:1] == b"\x01" and len(value) >= STAMP_BYTES else 0
        sid = reference(value[at:])
        if sid is None:
            return None
        if sid not in self._prefixes:
            self.load([(shard, value[at:])])
        prefix = self._prefixes.get(sid)
        return None if prefix is None else (sid, prefix)

    def _remember(self, sid: bytes, prefix: bytes) -> None:
        if len(self._prefixes) >= CACHE_LIMIT:
            self._prefixes.clear()
        self._prefixes[sid] = prefix
