"""The question asked before a claim or a first write (``missing_permissions``), on a real server
as real ACL users: what it names for each rule missing, and that asking never harms the server."""

from __future__ import annotations

import pytest
import redis

from celery_zset_scheduler.model.keys import KeySpace
from celery_zset_scheduler.store.acl import missing_permissions, store_rules
from celery_zset_scheduler.store.scripts import scripts_for
from celery_zset_scheduler.testing import RedisServer

from ..support import acl


def _ask(server: RedisServer, words: list[str]) -> list[str] | None:
    name = acl.create_user(server.client(), ["resetkeys", "resetchannels", "-@all", *words])
    client = server.client()
    client.execute_command("AUTH", name, acl.PASSWORD)
    try:
        return missing_permissions(scripts_for(client), KeySpace("zc", 4))
    finally:
        client.close()


@pytest.mark.default_user("its users are made here")
def test_each_rule_missing_is_named_and_asking_never_harms_the_server(redis_server: RedisServer) -> None:
    version = str(redis_server.client().info("server")["redis_version"])
    if int(version.split(".")[0]) < 7:
        pytest.skip(f"Redis {version} cannot be asked (no redis.acl_check_cmd)")
    rules = store_rules("dispatcher", KeySpace("zc", 4)).words()[3:]
    assert _ask(redis_server, rules) == []
    commands = [r for r in rules if r.startswith("+")]
    for rule in rules:
        try:
            reply = _ask(redis_server, [r for r in rules if r != rule])
        except redis.exceptions.NoPermissionError as exc:  # what the asking itself runs (the script, its keys)
            assert f"'{rule[1:]}'" in str(exc) or (rule.startswith("~") and "key" in str(exc)), (rule, exc)
            continue
        finally:
            assert redis_server.client().ping()  # Valkey 8.1 crashed when a key-taking command was asked without a key
        assert reply is not None
        if rule in reply:
            assert reply == [rule], (rule, reply)  # that command alone
        else:
            assert reply == [] and (rule in commands or rule.startswith("&")), (rule, reply)  # not the scripts' need
