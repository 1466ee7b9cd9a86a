"""mask_url: no password in any URL form redis-py (or Kombu) reads, and nothing from what cannot be parsed."""

from __future__ import annotations

import pytest

from celery_zset_scheduler.model.urls import UNPARSEABLE, mask_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://alice:s3cret@h:6379/0", "redis://alice:***@h:6379/0"),
        ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://s3cret@h/0", "redis://***@h/0"),  # a lone user-info: old clients read it as a password
        ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
        ("redis://h/0?db=1&password=s3cret&socket_timeout=2", "redis://h/0?db=1&password=***&socket_timeout=2"),
        ("redis://h/0?ssl_password=s3cret&ssl_keyfile=/k.pem", "redis://h/0?ssl_password=***&ssl_keyfile=/k.pem"),
        ("rediss://alice:s3cret@h:6380/0?ssl_cert_reqs=required", "rediss://alice:***@h:6380/0?ssl_cert_reqs=required"),
        ("unix:///run/redis.sock?db=0&password=s3cret", "unix:///run/redis.sock?db=0&password=***"),
        ("unix://:s3cret@/run/redis.sock", "unix://:***@/run/redis.sock"),
        ("redis://:s3cret@h1:6379/0;redis://:s3cret@h2:6379/0", "redis://:***@h1:6379/0;redis://:***@h2:6379/0"),
        ("amqp://guest:s3cret@rabbit:5672//", "amqp://guest:***@rabbit:5672//"),
        ("sentinel://:s3cret@h1:26379;sentinel://:s3cret@h2:26379", "sentinel://:***@h1:26379;sentinel://:***@h2:26379"),
        # A password with an unencoded '@', '/', '?' or '#': never part of it shown.
        ("redis://:s3@cret@h/0", "redis://:***@h/0"),
        ("redis://:s3/cret@h/0", "redis://***"),
        ("redis://:s3?cret@h/0", "redis://***"),
        ("redis://:s3#cret@h/0", "redis://***"),
        ("redis://h/0?password=s3@cret", "redis://h/0?password=***"),
        # A port that is not a number may be a password whose '@host' was forgotten.
        ("redis://:s3cret", "redis://:***"),
        ("redis://h:s3cret/0", "redis://h:***/0"),
        # Nothing to hide: unchanged.
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
        ("memory://", "memory://"),
    ],
)
def test_passwords_are_masked(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert "s3" not in mask_url(url) and "cret" not in mask_url(url)


def test_a_list_of_broker_urls_is_masked_url_by_url() -> None:
    assert mask_url(["redis://:s3cret@h1/0", "redis://:s3cret@h2/0"]) == "redis://:***@h1/0;redis://:***@h2/0"


@pytest.mark.parametrize("text", ["s3cret", "localhost:6379", "['redis://:s3cret@h']", ""])
def test_what_cannot_be_parsed_is_not_shown(text: str) -> None:
    assert mask_url(text) == UNPARSEABLE
