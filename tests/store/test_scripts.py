"""The Lua loader: includes, key counts, every file in use and wrapped once with the KEYS of its
header; and the scripts run on a real Redis."""

from __future__ import annotations

import importlib
import pkgutil
import re
from importlib import resources

import pytest
import redis

import celery_zset_scheduler.store
from celery_zset_scheduler.store.entries import cancel_call
from celery_zset_scheduler.store.pending import Store
from celery_zset_scheduler.store.schedule import NewEntry, schedule_call
from celery_zset_scheduler.store.scripts import DEFINITIONS, Call, Scripts, resolve_includes, sources

from ..support.tools import command_stats, reset_stats

_HEADER_KEY = re.compile(r"KEYS\[(\d+)\]\s+([a-z_]+)")


def _definitions() -> dict[str, tuple[str, ...]]:
    for module in pkgutil.iter_modules(celery_zset_scheduler.store.__path__):
        importlib.import_module(f"celery_zset_scheduler.store.{module.name}")
    return {name: d.keys for name, d in DEFINITIONS.items()}


def test_includes_are_pasted_once_and_recursively() -> None:
    files = {"a": '--- @include "b"\nlocal a = 1', "b": "local b = 2"}
    source = '--- @include "a"\n--- @include "b"\nreturn a + b'
    resolved = resolve_includes(source, read=files.__getitem__)
    assert resolved.count("local b = 2") == 1
    assert "local a = 1" in resolved and "already pasted" in resolved
    assert "@include" not in resolved.replace("(include b", "")


def test_every_lua_file_is_used_and_resolved() -> None:
    lua = resources.files("celery_zset_scheduler.store").joinpath("lua")
    names = {p.name.rsplit("-", 1)[0] for p in lua.iterdir() if p.name.endswith(".lua")}
    assert names == set(sources()) == set(_definitions())
    for source in sources().values():
        assert "@include" not in source.text
        assert source.numkeys >= 1


def test_each_wrapper_names_the_keys_of_its_script_header_in_order() -> None:
    lua = resources.files("celery_zset_scheduler.store").joinpath("lua")
    for name, keys in _definitions().items():
        (path,) = [p for p in lua.iterdir() if p.name.startswith(f"{name}-")]
        header = path.read_text("utf-8").split("]]", 1)[0]
        declared = [k for _, k in sorted((int(n), k) for n, k in _HEADER_KEY.findall(header))]
        assert tuple(declared) == keys, name
        assert len(keys) == sources()[name].numkeys, name


def test_every_script_compiles_on_redis(r: redis.Redis) -> None:
    for name, source in sources().items():
        sha = r.script_load(source.text)
        assert sha == source.sha
        assert r.script_exists(sha) == [True], name


def test_wrong_key_count_is_refused(r: redis.Redis) -> None:
    with pytest.raises(TypeError, match="claim.lua takes 11 keys, got 2"):
        Scripts(r).run(Call("claim", ("a", "b"), (), lambda reply: reply))


def test_pipelines_survive_a_flushed_script_cache(store: Store, r: redis.Redis) -> None:
    # A restarted Redis has no scripts: pipelined EVALSHA calls load them and run once more.
    store.schedule_many([NewEntry("a", 1, b"x"), NewEntry("b", 2, b"y")])
    r.script_flush()  # every master's, on a cluster
    assert [res.status for res in store.schedule_many([NewEntry("a", 1, b"x"), NewEntry("c", 3, b"z")])] == [
        "exists", "scheduled",
    ]
    r.script_flush()  # every master's, on a cluster
    assert store.cancel(["a", "c"]) == {"a": "cancelled", "c": "cancelled"}


def test_pipelined_calls_send_no_script_exists(store: Store, r: redis.Redis) -> None:
    store.schedule_many([NewEntry("warm", 1, b"x")])
    reset_stats(r)
    for _ in range(3):
        store.schedule_many([NewEntry("a", 1, b"x"), NewEntry("b", 2, b"y")])
    assert "cmdstat_script|exists" not in command_stats(r)


def test_a_pipeline_runs_each_call_once_when_only_some_scripts_are_missing(store: Store, r: redis.Redis) -> None:
    # After a restart some scripts are loaded again before others: the calls that ran must not run
    # twice (a claim run twice would strand its first batch in flight).
    store.schedule_many([NewEntry("a", 1, b"x")])  # loads the schedule script
    r.script_flush()  # every master's, on a cluster
    # The schedule script is back (on every node holding a shard), cancel is not.
    store.scripts.run_many([schedule_call(store.keys, s, [NewEntry(f"b-{s}", 1, b"x")], replace=False)
                            for s in range(store.shards)])
    calls: list[Call[object]] = []
    for shard in range(store.shards):
        calls.append(schedule_call(store.keys, shard, [NewEntry(f"new-{shard}", 1, b"x")], replace=False))
        calls.append(cancel_call(store.keys, shard, ["a"]))
    reset_stats(r)
    replies = store.scripts.run_many(calls)
    assert [[x.status for x in reply] for reply in replies[::2]] == [["scheduled"]] * store.shards
    assert sum(reply["a"] == "cancelled" for reply in replies[1::2]) == 1  # "a" cancelled in its shard
    stats = command_stats(r)
    assert stats["cmdstat_evalsha"]["calls"] == 3 * store.shards  # 2 per shard, then the NOSCRIPT cancels once more


def test_calls_sent_ahead_are_read_later_and_survive_a_flushed_script_cache(store: Store, r: redis.Redis) -> None:
    store.schedule_many([NewEntry("a", 1, b"x")])
    r.script_flush()  # every master's, on a cluster
    calls = [schedule_call(store.keys, s, [NewEntry(f"ahead-{s}", 1, b"x")], replace=False)
             for s in range(store.shards)]
    pending = store.scripts.begin(calls)
    if store.clustered:
        assert pending is None  # nothing sent: the caller runs them with settle
        assert store.scripts.settle(calls)
        return
    assert pending is not None
    assert store.cancel(["a"]) == {"a": "cancelled"}  # the store is used meanwhile, on other connections
    parse = pending.received()  # read: the connection is back in the pool before parsing
    assert [[x.status for x in reply] for reply in parse()] == [["scheduled"]] * store.shards
    assert store.cancel([f"ahead-{s}" for s in range(store.shards)]) == {
        f"ahead-{s}": "cancelled" for s in range(store.shards)}  # each ran once, after loading the script
