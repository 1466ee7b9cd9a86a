"""Settings: defaults, coercion, and a clear error for every kind of bad value."""

from __future__ import annotations

import pytest

from celery_zset_scheduler.errors import ConfigurationError
from celery_zset_scheduler.settings import Settings


def settings(values: dict[str, object], present: list[str] | None = None) -> Settings:
    return Settings.from_config(values.get, present if present is not None else list(values))


def test_defaults() -> None:
    s = settings({})
    assert (s.prefix, s.shards, s.batch_size, s.min_countdown) == ("zset", 8, 500, 0.0)
    assert s.accept_content == ("json",)
    assert s.heartbeat_interval == 1.0


def test_values_are_coerced_from_strings() -> None:
    # Django settings often come from environment variables, i.e. strings.
    s = settings({"zset_scheduler_shards": "16", "zset_scheduler_lock_timeout": "2.5"})
    assert s.shards == 16 and s.lock_timeout == 2.5


def test_the_cluster_switch_reads_auto_and_booleans() -> None:
    assert settings({}).cluster == "auto"
    assert settings({"zset_scheduler_cluster": True}).cluster == "true"
    assert settings({"zset_scheduler_cluster": "no"}).cluster == "false"
    assert settings({"zset_scheduler_cluster": "AUTO"}).cluster == "auto"
    s = settings({"zset_scheduler_wait_replicas": "1", "zset_scheduler_wait_timeout": "0.5"})
    assert (s.wait_replicas, s.wait_timeout) == (1, 0.5)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("zset_scheduler_shards", 0, "zset_scheduler_shards: expected an integer from 1 to 16384, got 0"),
        ("zset_scheduler_shards", "many", "expected an integer"),
        ("zset_scheduler_shards", True, "expected an integer"),
        ("zset_scheduler_batch_size", 10_000, "from 1 to 5000"),
        ("zset_scheduler_lock_timeout", -1, "zset_scheduler_lock_timeout: expected a number of seconds"),
        ("zset_scheduler_max_interval", 0, "more than 0 seconds"),
        ("zset_scheduler_min_countdown", float("nan"), "zset_scheduler_min_countdown"),
        ("zset_scheduler_url", "amqp://guest@localhost//", "a redis://, rediss://, unix:// or sentinel:// URL"),
        ("zset_scheduler_prefix", "a{b}", "zset_scheduler_prefix"),
        ("zset_scheduler_accept_content", [], "non-empty list of serializer names"),
        ("zset_scheduler_redis_options", "socket_timeout=1", "mapping of redis client keyword"),
        ("zset_scheduler_metrics_port", 70000, "zset_scheduler_metrics_port"),
        ("zset_scheduler_cluster", "maybe", "zset_scheduler_cluster: expected 'auto', true or false"),
        ("zset_scheduler_wait_replicas", -1, "zset_scheduler_wait_replicas: expected an integer from 0"),
        ("zset_scheduler_wait_timeout", 0, "zset_scheduler_wait_timeout"),
    ],
)
def test_invalid_values_name_the_setting(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        settings({key: value})


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("zset_scheduler_shard", "zset_scheduler_shards"),
        ("ZSET_SCHEDULER_BATCH", "zset_scheduler_batch_size"),
        # Django's namespace: the spelling that works in settings.py, not the Celery one.
        ("CELERY_ZSET_SCHEDULER_SHARD", "CELERY_ZSET_SCHEDULER_SHARDS"),
        ("celery_zset_scheduler_lock_timout", "celery_zset_scheduler_lock_timeout"),
    ],
)
def test_unknown_settings_are_refused_with_a_suggestion(key: str, meant: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^unknown setting '{key}'; did you mean {meant}[?]$"):
        settings({}, present=[key])


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://localhost:abc/0", "zset_scheduler_url: the port must be a number from 1 to 65535 "),
        ("redis://localhost:70000/0", "from 1 to 65535, got 70000 "),
        ("redis://localhost:0/0", "from 1 to 65535, got 0 "),
        ("redis://localhost:6379/zero", "zset_scheduler_url: the database after the host must be a number"),
        ("redis://:s3cret@localhost:6379x/0", "the port must be a number"),
        ("http://:s3cret@localhost/0", "expected a redis://, rediss://, unix:// or sentinel:// URL, got a http:// URL"),
        ("s3cret", "expected a redis://, rediss://, unix:// or sentinel:// URL, got no URL scheme"),
    ],
)
def test_a_bad_store_url_is_named_without_its_password(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as failed:
        settings({"zset_scheduler_url": url})
    assert "s3cret" not in str(failed.value)


@pytest.mark.parametrize("url", ["redis://h:6379/0", "redis://h", "redis://h/", "rediss://h:6380/15",
                                 "unix:///run/redis.sock?db=2", "redis://:pw@[::1]:6379/0"])
def test_good_store_urls(url: str) -> None:
    assert settings({"zset_scheduler_url": url}).url == url


def test_other_settings_are_not_ours() -> None:
    assert settings({}, present=["broker_url", "CELERY_TASK_SERIALIZER", "zset_other"]).shards == 8


def test_documentation_covers_every_setting() -> None:
    rows = Settings.documentation()
    assert [r[0] for r in rows] == list(Settings.keys())
    assert all(r[2] for r in rows)
