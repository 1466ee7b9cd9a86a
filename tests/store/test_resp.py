"""Many commands in one round trip, replies read by our own reader (real Redis)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.exceptions import NoScriptError

from celery_zset_scheduler.store import resp
from celery_zset_scheduler.testing import RedisServer


@pytest.fixture(params=[2, 3])
def client(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client, speaking RESP2 or RESP3."""
    c = redis.Redis.from_url(redis_server.url, protocol=request.param)
    c.flushall()
    yield c
    c.close()


def test_replies_of_every_kind_in_order(client: redis.Redis) -> None:
    big = b"x" * (3 * resp.CHUNK + 7)  # longer than one read: the reader asks for more mid-reply
    client.rpush("list", *[b"%d" % n for n in range(20_000)])
    client.set("big", big)
    client.set("text", "v")
    replies = resp.exchange(client, [
        ("GET", "text"), ("GET", "missing"), ("INCR", "n"), ("PING",), ("EVALSHA", "0" * 40, 0),
        ("LPUSH", "text", "x"), ("GET", "big"), ("LRANGE", "list", 0, -1),
        ("EVAL", "return {1, 'a', {2, false}, redis.error_reply('custom fail')}", 0),
        ("EVAL", "return {}", 0),
        ("HSET", "h", "f", "1"), ("HGETALL", "h"),
        ("EVAL", "redis.setresp(3); return {double = 1.5}", 0),
    ])
    assert replies is not None
    got, missing, n, pong, noscript, wrongtype, got_big, items, nested, empty, _, fields, double = replies
    resp3 = client.connection_pool.connection_kwargs.get("protocol") == 3
    assert fields == ({b"f": b"1"} if resp3 else [b"f", b"1"])  # a map in RESP3
    assert double == (1.5 if resp3 else b"1.5")
    assert (got, missing, n) == (b"v", None, 1)
    assert pong in (b"PONG", "PONG", True)
    assert isinstance(noscript, NoScriptError)
    assert isinstance(wrongtype, redis.ResponseError) and "WRONGTYPE" in str(wrongtype)
    assert got_big == big
    assert items == [b"%d" % n for n in range(20_000)]
    assert nested[:2] == [1, b"a"] and nested[2] == [2, None]
    assert isinstance(nested[3], redis.ResponseError) and "custom fail" in str(nested[3])
    assert empty == []
    assert client.get("text") == b"v"  # the connection went back to the pool in step
    assert client.incr("n") == 2


def test_arguments_it_cannot_pack_are_left_to_redis_py(client: redis.Redis) -> None:
    assert resp.exchange(client, [("SET", "k", 1.5)]) is None
    assert client.get("k") is None  # nothing was sent


def test_a_connection_closed_before_the_last_reply_is_dropped(client: redis.Redis) -> None:
    with pytest.raises(redis.ConnectionError):  # QUIT: the server answers OK, then hangs up
        resp.exchange(client, [("QUIT",), ("PING",)])
    assert client.ping()  # a fresh connection from the pool


@pytest.mark.parametrize("chunk", [1, 2, 7])
def test_replies_that_arrive_a_few_bytes_at_a_time_read_the_same(
        client: redis.Redis, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # Every element, length and CRLF split across reads: each is read once its bytes are in.
    client.rpush("list", *[b"%d" % n for n in range(300)], b"", b"\r\n" * 3)
    client.set("value", b"v\r\n" * 40)
    commands = [("LRANGE", "list", 0, -1), ("GET", "value"), ("GET", "missing"), ("INCR", "n"),
                ("EVAL", "return {1, {'a', {}, -3}, redis.error_reply('custom fail'), 'b'}", 0)]
    expected = resp.exchange(client, commands)
    monkeypatch.setattr(resp, "CHUNK", chunk)
    assert expected is not None
    again = resp.exchange(client, [*commands[:3], ("INCR", "m"), commands[4]])
    assert again is not None
    assert again[:3] == expected[:3] and again[3] == 1
    assert again[4][:2] == expected[4][:2] == [1, [b"a", [], -3]]
    assert isinstance(again[4][2], redis.ResponseError) and "custom fail" in str(again[4][2])
    assert again[4][3] == b"b"
    assert expected[0] == [b"%d" % n for n in range(300)] + [b"", b"\r\n" * 3]
    assert client.ping()


def test_big_values_among_small_ones_read_whole_and_in_order(client: redis.Redis) -> None:
    # Bigger than a read chunk: read into one buffer of their size; the replies around them too.
    big = [bytes([65 + i]) * (3 * resp.CHUNK + i) for i in range(3)]
    client.hset("h", mapping={"a": big[0], "b": b"small", "c": big[1]})
    client.set("s", big[2])
    replies = resp.exchange(client, [("HMGET", "h", "a", "b", "c", "x"), ("GET", "s"), ("PING",), ("STRLEN", "s")])
    assert replies == [[big[0], b"small", big[1], None], big[2], b"PONG", len(big[2])]
    assert client.ping()
