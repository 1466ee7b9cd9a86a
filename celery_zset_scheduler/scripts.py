"""Loading the Lua scripts: one ``lua/<name>-<number of keys>.lua`` file per atomic operation.

Shared helpers live in ``lua/includes/`` and are pasted in where a script says
``--- @include "name"`` (each at most once). The key count in the file name is checked on every
call, so a wrapper that passes the wrong keys fails loudly instead of touching the wrong slot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.client import Pipeline
from redis.commands.core import Script
from redis.exceptions import NoScriptError

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


@cache
def sources() -> dict[str, tuple[int, str]]:
    """``name -> (number of keys, resolved source)`` for every script shipped in the package."""
    found: dict[str, tuple[int, str]] = {}
    for entry in resources.files(__package__).joinpath("lua").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found[match.group(1)] = (int(match.group(2)), resolve_includes(entry.read_text("utf-8")))
    return found


class LuaScript:
    """A registered script that checks its key count and runs on a client or a pipeline."""

    def __init__(self, client: Any, name: str) -> None:
        self.name = name
        self.numkeys, source = sources()[name]
        self._script: Script = client.register_script(source)

    def __call__(self, keys: Sequence[str], args: Sequence[Any] = (), client: Any = None) -> Any:
        if len(keys) != self.numkeys:
            raise TypeError(f"{self.name}.lua takes {self.numkeys} keys, got {len(keys)}")
        if isinstance(client, Pipeline):
            # Queued as a bare EVALSHA: redis-py would otherwise send SCRIPT EXISTS for every
            # script of the pipeline before each execute, a second round trip every time.
            client.__dict__.setdefault("_zset_scripts", {})[self.name] = self._script
            return client.evalsha(self._script.sha, len(keys), *keys, *args)
        return self._script(keys=keys, args=args, client=client)


def execute(pipe: Any) -> list[Any]:
    """Run a pipeline holding script calls; raise its first error, as ``pipe.execute()`` does.

    After a script cache flush (a restarted Redis) the calls answered NOSCRIPT did not run: the
    scripts are loaded and only those calls are sent again. Calls that did run are never repeated,
    so a pipeline mixing acks and claims cannot claim twice.
    """
    stack = list(pipe.command_stack)
    scripts: dict[str, Script] = pipe.__dict__.pop("_zset_scripts", {})
    results = list(pipe.execute(raise_on_error=False))
    missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if missing:
        client = redis.Redis(connection_pool=pipe.connection_pool)
        for script in scripts.values():
            script.sha = client.script_load(script.script)
        again = client.pipeline(transaction=False)
        for i in missing:
            args, options = stack[i]
            again.execute_command(*args, **options)  # type: ignore[no-untyped-call]
        for i, reply in zip(missing, again.execute(raise_on_error=False), strict=True):
            results[i] = reply
    for reply in results:
        if isinstance(reply, Exception):
            raise reply
    return results


class Scripts:
    """Every script, registered on one client (cheap: hashing only, loaded on first use)."""

    def __init__(self, client: Any) -> None:
        self.schedule = LuaScript(client, "schedule")
        self.claim = LuaScript(client, "claim")
        self.ack = LuaScript(client, "ack")
        self.release = LuaScript(client, "release")
        self.reap = LuaScript(client, "reap")
        self.cancel = LuaScript(client, "cancel")
        self.reschedule = LuaScript(client, "reschedule")
        self.get = LuaScript(client, "get")
        self.page = LuaScript(client, "page")
        self.acquire = LuaScript(client, "acquire")
        self.renew = LuaScript(client, "renew")
        self.unlock = LuaScript(client, "unlock")
        self.heartbeat = LuaScript(client, "heartbeat")
        self.meta = LuaScript(client, "meta")
        self.dlq_add = LuaScript(client, "dlq_add")
        self.dlq_page = LuaScript(client, "dlq_page")
        self.dlq_remove = LuaScript(client, "dlq_remove")
        self.idem_acquire = LuaScript(client, "idem_acquire")
        self.idem_renew = LuaScript(client, "idem_renew")
        self.idem_finish = LuaScript(client, "idem_finish")
        self.idem_release = LuaScript(client, "idem_release")

    def loaded(self) -> set[str]:
        return {s.name for s in vars(self).values() if isinstance(s, LuaScript)}
