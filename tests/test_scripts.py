"""The Lua loader: includes, key counts, every file in use; and the scripts run on a real Redis."""

from __future__ import annotations

from importlib import resources

import pytest
import redis

from celery_zset_scheduler.scripts import LuaScript, Scripts, resolve_includes, sources


def test_includes_are_pasted_once_and_recursively() -> None:
    files = {"a": '--- @include "b"\nlocal a = 1', "b": "local b = 2"}
    source = '--- @include "a"\n--- @include "b"\nreturn a + b'
    resolved = resolve_includes(source, read=files.__getitem__)
    assert resolved.count("local b = 2") == 1
    assert "local a = 1" in resolved and "already pasted" in resolved
    assert "@include" not in resolved.replace("(include b", "")


def test_every_lua_file_is_used_and_resolved(r: redis.Redis) -> None:
    lua = resources.files("celery_zset_scheduler").joinpath("lua")
    names = {p.name.rsplit("-", 1)[0] for p in lua.iterdir() if p.name.endswith(".lua")}
    assert names == set(sources()) == Scripts(r).loaded()
    for numkeys, source in sources().values():
        assert "@include" not in source
        assert numkeys >= 1


def test_every_script_compiles_on_redis(r: redis.Redis) -> None:
    for name, (_, source) in sources().items():
        sha = r.script_load(source)
        assert r.script_exists(sha) == [True], name


def test_wrong_key_count_is_refused(r: redis.Redis) -> None:
    with pytest.raises(TypeError, match="claim.lua takes 7 keys, got 2"):
        LuaScript(r, "claim")(["a", "b"], [])
