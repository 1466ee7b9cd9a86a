"""Points in time as people and Celery write them, turned into epoch milliseconds.

Shared by every front end (the CLI's ``--eta``/``--due-before``, a Django form, the Python API):
an ISO 8601 date-time (a naive one is UTC, as a Celery worker reads a naive ``eta``), ``now``, or
an offset from now such as ``+10m``, ``-2h``, ``30s``, ``1d12h``.

Due times are integer milliseconds rounded *up*: a claim takes every score ``<= TIME`` in whole
milliseconds, so rounding down could run a task up to 1 ms early.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

_OFFSET = re.compile(r"^([+-]?)((?:\d+(?:\.\d+)?[smhdw])+)$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def datetime_ms(when: datetime) -> int:
    """Epoch milliseconds of a date-time, rounded up; naive ones are UTC (Celery's reading)."""
    aware = when if when.tzinfo is not None and when.utcoffset() is not None else when.replace(tzinfo=timezone.utc)
    return math.ceil(aware.timestamp() * 1000)


def eta_ms(eta: str | datetime) -> int:
    """Epoch milliseconds of an ``eta`` header or argument (ISO 8601 text or a datetime)."""
    return datetime_ms(datetime.fromisoformat(eta) if isinstance(eta, str) else eta)


def datetime_us(when: datetime) -> int:
    """Exact epoch microseconds of a date-time (integer arithmetic); naive ones are UTC."""
    aware = when if when.tzinfo is not None and when.utcoffset() is not None else when.replace(tzinfo=timezone.utc)
    return (aware - _EPOCH) // _MICROSECOND


def us_isoformat(us: int) -> str:
    """The UTC date-time of epoch microseconds as ``datetime.isoformat()`` writes it, which is how
    Celery writes an ``eta`` with the default (UTC) timezone: ``2024-05-01T12:00:00.250000+00:00``."""
    return (_EPOCH + timedelta(microseconds=us)).isoformat()


def isoformat_us(text: str) -> int | None:
    """The inverse of :func:`us_isoformat`: epoch microseconds of a UTC ISO date-time written that
    way, or None when ``text`` is anything else (so that nothing but the exact text comes back)."""
    if not text.endswith("+00:00"):
        return None
    try:
        us = datetime_us(datetime.fromisoformat(text))
    except ValueError:
        return None
    return us if us_isoformat(us) == text else None


def countdown_ms(seconds: float, now: float | None = None) -> int:
    """Epoch milliseconds ``seconds`` from now (this host's clock, as Celery's countdown)."""
    return math.ceil(((time.time() if now is None else now) + float(seconds)) * 1000)


def iso(ms: int | None) -> str | None:
    """UTC ISO 8601 with milliseconds, e.g. ``2024-05-01T12:00:00.250Z``."""
    if ms is None:
        return None
    when = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


@dataclass(frozen=True)
class Moment:
    """A point in time as typed: an absolute date-time, or seconds from now."""

    text: str
    at: datetime | None = None
    offset: float = 0.0

    def ms(self, now: float | None = None) -> int:
        if self.at is not None:
            return datetime_ms(self.at)
        return countdown_ms(self.offset, now)


def parse_moment(text: str) -> Moment:
    """A :class:`Moment` from ``now``, an offset (``+10m``, ``-2h``, ``1d12h``) or ISO 8601;
    raises ``ValueError`` with the accepted forms."""
    clean = str(text).strip()
    if clean.lower() == "now":
        return Moment(clean)
    match = _OFFSET.match(clean.lower())
    if match:
        seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(match.group(2)))
        return Moment(clean, offset=-seconds if match.group(1) == "-" else seconds)
    try:
        return Moment(clean, at=datetime.fromisoformat(clean.replace("Z", "+00:00")))
    except ValueError:
        raise ValueError(f"{clean!r}: expected an ISO 8601 date-time, 'now' or an offset like +10m, -2h, 1d") from None
