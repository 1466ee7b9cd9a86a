"""Times as people type them and Celery sends them, in epoch milliseconds (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_zset_scheduler.model.times import Moment, countdown_ms, datetime_ms, eta_ms, iso, parse_moment


def test_naive_datetimes_are_utc_as_a_celery_worker_reads_them() -> None:
    naive = datetime(2026, 3, 29, 1, 30, 0)
    assert datetime_ms(naive) == datetime_ms(naive.replace(tzinfo=timezone.utc)) == 1774747800000
    berlin = datetime(2026, 3, 29, 3, 30, tzinfo=timezone(timedelta(hours=2)))
    assert datetime_ms(berlin) == 1774747800000
    assert eta_ms("2026-03-29T01:30:00+00:00") == eta_ms(naive)


def test_due_times_round_up_so_nothing_runs_early() -> None:
    assert datetime_ms(datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)) == 1767225600001
    assert countdown_ms(0.0005, now=100.0) == 100001
    assert countdown_ms(1.0, now=100.0) == 101000


def test_moments_now_offsets_and_iso() -> None:
    assert parse_moment(" now ") == Moment("now")
    assert parse_moment("+10m").offset == 600 and parse_moment("-2h").offset == -7200
    assert parse_moment("1d12h").offset == 129600 and parse_moment("30s").offset == 30
    absolute = parse_moment("2026-05-01T12:00:00Z")
    assert absolute.at == datetime(2026, 5, 1, 12, tzinfo=timezone.utc)
    assert absolute.ms() == 1777636800000
    assert parse_moment("+1m").ms(now=1000.0) == 1060000


@pytest.mark.parametrize("text", ["", "soon", "10", "+-5m", "2026-13-01"])
def test_anything_else_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="ISO 8601 date-time, 'now' or an offset"):
        parse_moment(text)


def test_iso_is_utc_with_milliseconds() -> None:
    assert iso(1777636800250) == "2026-05-01T12:00:00.250Z"
    assert iso(None) is None
