"""The Redis ACL rules the store needs, per role: commands by name, key patterns, channels.

The commands the Lua scripts run are read from the scripts themselves (Redis checks a user's
permissions for every command a script runs), so they cannot drift from the code. They are granted
to every role: each role runs most scripts, and the key patterns keep them to the store's keys.
What differs per role is what the Python side runs besides (``INFO``, ``SUBSCRIBE``, ``WAIT``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..model.keys import KeySpace
from .permissions import SCRIPT_CALL, glob_escape, refusal
from .scripts import ScriptDef, Scripts, sources

#: The roles a process plays, each with rules of its own.
ROLES = ("producer", "worker", "dispatcher", "cli")

# Every client: redis-py's health check, the database (SELECT when it is not 0), the scripts
# (EVALSHA, EVAL for the streaming writer; a pipeline asks SCRIPT EXISTS and loads what is
# missing) and transactions (pipelines of the shard scripts, WATCH in the generic publisher).
_CLIENT = ("ping", "select", "evalsha", "eval", "script|load", "script|exists",
           "multi", "exec", "discard", "watch", "unwatch")

# What the Python side reads and writes outside the scripts (status, paging, revokes, leases).
_DATA = ("get", "mget", "set", "del", "unlink", "exists", "type", "pexpire", "time",
         "hget", "hmget", "hgetall", "hlen", "hset", "hsetnx", "hdel", "hincrby", "hscan",
         "zcard", "zcount", "zscore", "zmscore", "zrange", "zrangebyscore", "zrangebylex", "zrem", "zscan",
         "llen", "lrange", "lindex", "lpush", "rpop", "rpoplpush", "publish")

# Per role, beyond the above: the wake channel for a dispatcher, the revoke channel for a worker;
# INFO where the dispatcher decides its path and checks replicas, and for `doctor`.
_ROLE_COMMANDS: dict[str, tuple[str, ...]] = {
    "producer": (),
    "worker": ("subscribe", "unsubscribe"),
    "dispatcher": ("subscribe", "unsubscribe", "info"),
    "cli": ("info",),
}

@lru_cache(maxsize=1)
def script_commands() -> tuple[str, ...]:
    """The commands the Lua scripts run, lower case and sorted (INFO aside: see ``_ROLE_COMMANDS``)."""
    found = {m.lower() for source in sources().values() for m in SCRIPT_CALL.findall(source.text)}
    return tuple(sorted(found - {"info"}))


@dataclass(frozen=True)
class Rules:
    """One ACL user's rules: commands, key patterns and channels (without ``~`` / ``&`` / ``+``)."""

    commands: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()

    def __add__(self, other: Rules) -> Rules:
        def merge(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys(a + b))

        return Rules(merge(self.commands, other.commands), merge(self.keys, other.keys),
                     merge(self.channels, other.channels))

    def words(self) -> list[str]:
        """The rules as ``ACL SETUSER`` arguments, after a reset of the user's permissions."""
        return ["resetkeys", "resetchannels", "-@all",
                *(f"+{c}" for c in self.commands), *(f"~{k}" for k in self.keys),
                *(f"&{c}" for c in self.channels)]


def store_rules(role: str, keys: KeySpace, *, wait_replicas: int = 0, detect_cluster: bool = False) -> Rules:
    """What the store's user needs for ``role`` under ``keys.prefix``; ``detect_cluster``: the
    client asks INFO whether the server is a cluster (``zset_scheduler_cluster = "auto"``)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    commands = [*_CLIENT, *_DATA, *script_commands(), *_ROLE_COMMANDS[role]]
    if wait_replicas > 0:
        commands.append("wait")
    if (wait_replicas > 0 or detect_cluster) and "info" not in commands:
        commands.append("info")  # the hand-off scripts read INFO replication
    return Rules(
        commands=tuple(dict.fromkeys(commands)),
        keys=key_patterns(keys),
        # the wake channel: the scripts publish to it, a dispatcher listens; the revoke channel:
        # a revoke publishes to it, a worker listens (a dispatcher needs only the first)
        channels=(glob_escape(keys.wake_channel),
                  *(() if role == "dispatcher" else (glob_escape(keys.revoke_channel),))),
    )


def key_patterns(keys: KeySpace) -> tuple[str, str]:
    """The store's key patterns: every key is ``prefix:...`` or, with a hash tag, ``{prefix:...``."""
    prefix = glob_escape(keys.prefix)
    return f"{prefix}:*", f"{{{prefix}:*"


def store_refusal(exc: BaseException, keys: KeySpace) -> tuple[str, str]:
    """:func:`.permissions.refusal` of the store's user: a refused key or channel is granted by
    the store's patterns."""
    plain, tagged = key_patterns(keys)
    return refusal(exc, keys=f"~{plain} ~{tagged}", channels=f"&{plain}")


ACL_CHECK = ScriptDef("acl_check", ("shard_key", "prefix_key"))


def missing_permissions(scripts: Scripts, keys: KeySpace) -> list[str] | None:
    """The rules the user lacks for what the scripts run (``+cmd``, ``~pattern``), asked of the
    server without running them; None when the server cannot tell (before Redis 7)."""
    reply = scripts.run(ACL_CHECK.call_with(
        (keys.shard(0).due, keys.meta), script_commands(), lambda r: r))
    if not reply:
        return None if reply is None else []
    plain, tagged = key_patterns(keys)
    rules: list[str] = []
    for item in (r.decode() if isinstance(r, bytes) else str(r) for r in reply):
        if item.startswith("key:"):
            rules.append(f"~{tagged}" if item[4:].startswith("{") else f"~{plain}")
        else:
            rules.append(f"+{item}")
    return rules
