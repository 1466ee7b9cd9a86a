"""The Lua loader: includes, key counts, every file in use; and the scripts run on a real Redis."""

from __future__ import annotations

from importlib import resources

import pytest
import redis

from celery_zset_scheduler.scripts import LuaScript, Scripts, execute, resolve_includes, sources
from celery_zset_scheduler.store import NewEntry, Store


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
    with pytest.raises(TypeError, match="claim.lua takes 8 keys, got 2"):
        LuaScript(r, "claim")(["a", "b"], [])


def test_pipelines_survive_a_flushed_script_cache(store: Store, r: redis.Redis) -> None:
    # A restarted Redis has no scripts: pipelined EVALSHA calls load them and run once more.
    store.schedule_many([NewEntry("a", 1, b"x"), NewEntry("b", 2, b"y")])
    r.script_flush()
    assert [res.status for res in store.schedule_many([NewEntry("a", 1, b"x"), NewEntry("c", 3, b"z")])] == [
        "exists", "scheduled",
    ]
    r.script_flush()
    assert store.cancel(["a", "c"]) == {"a": "cancelled", "c": "cancelled"}


def test_pipelined_calls_send_no_script_exists(store: Store, r: redis.Redis) -> None:
    store.schedule_many([NewEntry("warm", 1, b"x")])
    r.config_resetstat()
    for _ in range(3):
        store.schedule_many([NewEntry("a", 1, b"x"), NewEntry("b", 2, b"y")])
    assert "cmdstat_script|exists" not in r.info("commandstats")


def test_a_pipeline_runs_each_call_once_when_only_some_scripts_are_missing(store: Store, r: redis.Redis) -> None:
    # After a restart some scripts are loaded again before others: the calls that ran must not run
    # twice (a claim run twice would strand its first batch in flight).
    store.schedule_many([NewEntry("a", 1, b"x")])  # loads the schedule script
    r.script_flush()
    store.schedule_many([NewEntry("b", 1, b"x")])  # the schedule script is back, cancel is not
    pipe = store.client.pipeline(transaction=False)
    for shard in range(store.shards):
        sk = store.keys.shard(shard)
        store.scripts.schedule([sk.due, sk.msg, sk.wake, sk.pending_keys, sk.id_keys],
                               [store.keys.wake_channel, shard, "0", f"new-{shard}", 1, b"x", ""], client=pipe)
        store.scripts.cancel([sk.due, sk.msg, sk.inflight, sk.pending_keys, sk.id_keys], ["a"], client=pipe)
    r.config_resetstat()
    replies = execute(pipe)
    assert replies[::2] == [[1]] * store.shards  # each scheduled exactly once
    assert sum(reply[0] for reply in replies[1::2]) == 1  # "a" cancelled in its shard
    stats = r.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 3 * store.shards  # 2 per shard, then the NOSCRIPT cancels once more
