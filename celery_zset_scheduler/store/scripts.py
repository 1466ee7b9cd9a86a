"""The Lua scripts: one ``lua/<name>-<number of keys>.lua`` file per atomic operation, and the one
place where they are run.

Shared helpers live in ``lua/includes/`` and are pasted in where a script says
``--- @include "name"`` (each at most once). Each script has one :class:`ScriptDef`, next to the
store code that uses it: the names of its KEYS in the order of the file's header (a test compares
them with the header). Its typed wrapper builds a :class:`Call` (keys from a key set by name,
arguments by name, and how to read the reply), and :class:`Scripts` runs calls: one, or many in one
round trip. The key count in the file name is checked on every call, so a wrapper that passes the
wrong keys fails loudly instead of touching the wrong slot.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

import redis
from redis.exceptions import NoScriptError

from ..errors import NotReplicated
from .connections import checkout
from .resp import Sent, exchange, pack, read_replies, send

T = TypeVar("T")

_INCLUDE = re.compile(r'^--- @include "([A-Za-z0-9_\-]+)"\s*$', re.MULTILINE)
_NAME = re.compile(r"^([a-z_]+)-(\d+)\.lua$")


def _read(path: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(path).read_text(encoding="utf-8")


def resolve_includes(source: str, read: Any = None, _seen: set[str] | None = None) -> str:
    """Paste every ``--- @include "name"`` from ``includes/name.lua``, recursively, once each."""
    read = read or (lambda name: _read(f"includes/{name}.lua"))
    seen = set() if _seen is None else _seen

    def paste(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return f"-- (include {name}: already pasted above)"
        seen.add(name)
        return resolve_includes(read(name), read, seen).rstrip("\n")

    return _INCLUDE.sub(paste, source)


@dataclass(frozen=True)
class Source:
    name: str
    numkeys: int
    text: str  # with the includes pasted in
    sha: str


@cache
def sources() -> dict[str, Source]:
    """Every script shipped in the package, by name."""
    found: dict[str, Source] = {}
    for entry in resources.files(__package__).joinpath("lua").iterdir():
        match = _NAME.match(entry.name)
        if match:
            text = resolve_includes(entry.read_text("utf-8"))
            sha = hashlib.sha1(text.encode("utf-8")).hexdigest()
            found[match.group(1)] = Source(match.group(1), int(match.group(2)), text, sha)
    return found


@dataclass(frozen=True)
class Call(Generic[T]):
    """One script call, ready to run: its keys in header order, its arguments, and its reply reader."""

    script: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]
    parse: Callable[[Any], T]


#: Every ScriptDef made, by script name (the test of the headers walks it).
DEFINITIONS: dict[str, ScriptDef] = {}


@dataclass(frozen=True)
class ScriptDef:
    """A script's KEYS by name, in the order of its file's header.

    ``keys`` name attributes of the key set the wrapper passes (a shard's ``ShardKeys``, the
    ``KeySpace``), or, for a key computed per call, the name its header gives it.
    """

    name: str
    keys: tuple[str, ...]
    #: Takes more keys after its fixed ones (keys computed per call, as its header says).
    variadic: bool = False

    def __post_init__(self) -> None:
        DEFINITIONS[self.name] = self

    def call(self, keyset: Any, args: Sequence[Any], parse: Callable[[Any], T]) -> Call[T]:
        """A call taking each key from ``keyset`` by name."""
        return Call(self.name, tuple(getattr(keyset, k) for k in self.keys), tuple(args), parse)

    def call_with(self, keys: Sequence[str], args: Sequence[Any], parse: Callable[[Any], T]) -> Call[T]:
        """A call with keys given in header order (for keys computed per call)."""
        if len(keys) != len(self.keys):
            raise TypeError(f"{self.name}.lua takes the keys {self.keys}, got {len(keys)}")
        return Call(self.name, tuple(keys), tuple(args), parse)

    def call_extended(self, keyset: Any, extra: Sequence[str], args: Sequence[Any],
                      parse: Callable[[Any], T]) -> Call[T]:
        """A call of a variadic script: the named keys from ``keyset``, then ``extra``."""
        if not self.variadic:
            raise TypeError(f"{self.name}.lua takes no keys beyond {self.keys}")
        return Call(self.name, (*(getattr(keyset, k) for k in self.keys), *extra), tuple(args), parse)


def as_int(reply: Any) -> int:
    return int(reply)


def as_bool(reply: Any) -> bool:
    return bool(int(reply))


class Scripts:
    """Runs calls on one client: a call alone, or many in one pipelined round trip.

    Calls are sent as bare ``EVALSHA`` (redis-py would check every script of a pipeline with
    ``SCRIPT EXISTS`` before each execute: one more round trip per claim, ack and bulk chunk).
    After a flushed script cache (a restarted Redis) only the calls answered NOSCRIPT are sent
    again, once the scripts are loaded: a call that ran is never repeated, so a pipeline that acks
    one batch and claims the next cannot claim twice.

    ``wait``: ``(replicas, timeout_ms)`` for Redis ``WAIT`` after *durable* calls (the scheduling
    writes): sent on the same connection, in the same round trip, so it covers exactly those
    writes. Fewer replicas in time raises :class:`~..errors.NotReplicated` (the writes are on the
    master). :mod:`.cluster_scripts` is the Redis Cluster implementation.
    """

    def __init__(self, client: Any, wait: tuple[int, int] | None = None) -> None:
        self.client = client
        self.wait = wait if wait and wait[0] > 0 else None
        self._sources = sources()
        self._begun: set[str] = set()  # scripts loaded before calls to them were first begun

    def check_wait(self, reply: Any) -> None:
        if self.wait is None:
            return
        if isinstance(reply, Exception):
            raise reply
        if int(reply) < self.wait[0]:
            raise NotReplicated(
                f"stored on the master, but {int(reply)} of the {self.wait[0]} replicas asked for "
                f"(zset_scheduler_wait_replicas) acknowledged it within {self.wait[1]} ms"
            )

    def _evalsha_args(self, call: Call[Any]) -> tuple[Any, ...]:
        source = self._sources[call.script]
        definition = DEFINITIONS.get(call.script)
        if definition is not None and definition.variadic and len(call.keys) >= source.numkeys:
            pass  # the fixed keys, then the ones computed per call
        elif len(call.keys) != source.numkeys:
            raise TypeError(f"{call.script}.lua takes {source.numkeys} keys, got {len(call.keys)}")
        return (source.sha, len(call.keys), *call.keys, *call.args)

    def run(self, call: Call[T], client: Any = None, *, durable: bool = False,
            before: Sequence[tuple[Any, ...]] = ()) -> T:
        """One call; ``before``: commands sent ahead of it in the same round trip (their replies
        are not returned; an error one of them meets is raised after the call has run)."""
        if durable and self.wait is not None:
            return self.run_many([call], durable=True, before=before)[0]  # type: ignore[no-any-return]
        target = self.client if client is None else client
        args = self._evalsha_args(call)
        if type(target) is redis.Redis:
            return call.parse(self._packed(target, before, args, call.script))
        if before:
            return self.run_many([call], before=before)[0]  # type: ignore[no-any-return]
        try:
            reply = target.evalsha(*args)
        except NoScriptError:
            target.script_load(self._sources[call.script].text)
            reply = target.evalsha(*args)
        return call.parse(reply)

    def _packed(self, client: redis.Redis, before: Sequence[tuple[Any, ...]], args: tuple[Any, ...],
                script: str) -> Any:
        """``before`` then ``EVALSHA args`` written at once on a pooled connection: one round trip,
        without redis-py's per-command machinery (most of the Python time of a small call). A
        connection that fails is dropped and the same commands go once through the client (its
        retries)."""
        pool = client.connection_pool
        conn: Any = checkout(pool)
        commands = [*before, ("EVALSHA", *args)]
        replies: list[Any] = []
        try:
            packed = pack(commands)
            conn.send_packed_command([packed] if packed is not None else conn.pack_commands(commands),
                                     check_health=False)
            replies = read_replies(conn, len(commands))
        except (redis.ConnectionError, redis.TimeoutError):
            conn.disconnect()
            pool.release(conn)
            target: Any = client
            for command in before:
                target.execute_command(*command)
            return self._evalsha(client, args, script)
        except BaseException:
            conn.disconnect()
            pool.release(conn)
            raise
        pool.release(conn)
        reply = replies[-1]
        if isinstance(reply, NoScriptError):
            reply = self._evalsha(client, args, script)
        elif isinstance(reply, Exception):
            raise reply
        for failed in replies[:-1]:
            if isinstance(failed, Exception):
                raise failed
        return reply

    def _evalsha(self, client: Any, args: tuple[Any, ...], script: str) -> Any:
        try:
            return client.evalsha(*args)
        except NoScriptError:
            client.script_load(self._sources[script].text)
            return client.evalsha(*args)

    def run_many(self, calls: Sequence[Call[Any]], *, durable: bool = False,
                 before: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        """Every call in one round trip; replies in call order. Raises the first error, after
        every call that could run has run (as ``pipeline.execute()`` does). ``before``: commands
        sent ahead of the calls in the same round trip."""
        replies = self.settle(calls, durable=durable, before=before)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def settle(self, calls: Sequence[Call[Any]], *, durable: bool = False,
               before: Sequence[tuple[Any, ...]] = ()) -> list[Any]:
        """Every call in one round trip; each reply parsed, or the error that call met.
        ``before``: commands sent ahead of the calls (an error of one of them is raised)."""
        if not calls:
            return []
        wait = self.wait if durable else None
        commands = [*before, *(("EVALSHA", *self._evalsha_args(call)) for call in calls),
                    *((("WAIT", *wait),) if wait is not None else ())]
        # By hand on a plain client (see .resp); redis-py's pipeline for any other.
        raw = exchange(self.client, commands) if type(self.client) is redis.Redis else None
        if raw is None:
            pipe: Any = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            raw = list(pipe.execute(raise_on_error=False))
        for failed in raw[:len(before)]:
            if isinstance(failed, Exception):
                raise failed
        return self._settled(calls, raw[len(before):], wait)

    def begin(self, calls: Sequence[Call[Any]]) -> Pending | None:
        """``calls`` sent in one round trip whose replies :meth:`Pending.replies` reads later (the
        caller works meanwhile); None where they cannot be sent so (a cluster, an argument the
        packer leaves to redis-py): nothing was sent, the caller runs them with :meth:`settle`."""
        if not calls or type(self.client) is not redis.Redis:
            return None
        for name in {call.script for call in calls} - self._begun:
            # Loaded first: a call that found no script would run again only when its reply is
            # read, after what the caller sent meanwhile (an ack of the batch published since).
            self.client.script_load(self._sources[name].text)
            self._begun.add(name)
        sent = send(self.client, [("EVALSHA", *self._evalsha_args(call)) for call in calls])
        return None if sent is None else Pending(self, calls, sent)

    def _settled(self, calls: Sequence[Call[Any]], raw: list[Any], wait: tuple[int, int] | None) -> list[Any]:
        """The replies of ``calls`` parsed (an error as its own reply), the ones that found no
        script run again after loading it, ``WAIT``'s reply last in ``raw`` when ``wait`` is given."""
        waits = wait is not None
        waited: list[Any] = []  # checked once every call that could run has run
        if waits:
            reply = raw.pop()
            if any(not isinstance(r, Exception) for r in raw):  # WAIT says nothing of calls that did not run
                waited.append(reply)
        missing = [i for i, r in enumerate(raw) if isinstance(r, NoScriptError)]
        if missing:
            client = redis.Redis(connection_pool=self.client.connection_pool)
            for name in {calls[i].script for i in missing}:
                client.script_load(self._sources[name].text)
            again: Any = client.pipeline(transaction=False)
            for i in missing:
                again.evalsha(*self._evalsha_args(calls[i]))
            if wait is not None:
                again.execute_command("WAIT", *wait)
            replies = list(again.execute(raise_on_error=False))
            if waits:
                reply = replies.pop()
                if any(not isinstance(r, Exception) for r in replies):
                    waited.append(reply)
            for i, reply in zip(missing, replies, strict=True):
                raw[i] = reply
        for reply in waited:
            self.check_wait(reply)
        out: list[Any] = []
        for call, reply in zip(calls, raw, strict=True):
            out.append(reply if isinstance(reply, Exception) else call.parse(reply))
        return out


class Pending:
    """Script calls sent, their replies still to read (:meth:`Scripts.begin`)."""

    def __init__(self, scripts: Scripts, calls: Sequence[Call[Any]], sent: Sent) -> None:
        self._scripts, self._calls, self._sent = scripts, calls, sent

    def replies(self) -> list[Any]:
        """As :meth:`Scripts.settle` returns them: each parsed, or the error that call met."""
        return self.received()()

    def received(self) -> Callable[[], list[Any]]:
        """The replies read off the connection; the function returned parses them (so the
        caller can send its next commands between the two)."""
        raw = self._sent.replies()
        if any(isinstance(r, NoScriptError) for r in raw):
            # A script the server lost (a restart, a flush): loaded and run again now, before the
            # caller sends anything that must run after these calls.
            settled = self._scripts._settled(self._calls, raw, None)
            return lambda: settled
        return lambda: self._scripts._settled(self._calls, raw, None)


def scripts_for(client: Any, wait: tuple[int, int] | None = None) -> Scripts:
    """The runner for ``client``: per node on a Redis Cluster, one pipeline otherwise."""
    if isinstance(client, redis.RedisCluster):
        from .cluster_scripts import ClusterScripts

        return ClusterScripts(client, wait)
    return Scripts(client, wait)
