"""The parsers of the settings: each takes a setting's name and value, returns the value it means
or raises a :class:`ConfigurationError` saying what was expected (never echoing a URL)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError

PREFIX = "zset_scheduler_"

Parser = Callable[[str, Any], Any]


def _fail(key: str, value: Any, expected: str) -> ConfigurationError:
    return ConfigurationError(f"{PREFIX}{key}: expected {expected}, got {value!r}")


def int_range(lo: int, hi: int) -> Parser:
    def parse(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise _fail(key, value, f"an integer from {lo} to {hi}")
        try:
            number = int(str(value).strip()) if isinstance(value, str) else value
        except ValueError:
            raise _fail(key, value, f"an integer from {lo} to {hi}") from None
        if not isinstance(number, int) or not lo <= number <= hi:
            raise _fail(key, value, f"an integer from {lo} to {hi}")
        return number

    return parse


def seconds(lo: float, hi: float = math.inf, lo_open: bool = False) -> Parser:
    bound = f"{'more than' if lo_open else 'at least'} {lo:g} seconds"

    def parse(key: str, value: Any) -> float:
        if isinstance(value, bool):
            raise _fail(key, value, f"a number of seconds ({bound})")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise _fail(key, value, f"a number of seconds ({bound})") from None
        too_low = number <= lo if lo_open else number < lo
        if math.isnan(number) or too_low or number > hi:
            raise _fail(key, value, f"a number of seconds ({bound}, at most {hi:g})")
        return number

    return parse


def optional_url(key: str, value: Any) -> str | None:
    # The URL itself is never echoed: it may hold a password.
    if value is None or value == "":
        return None
    expected = f"{PREFIX}{key}: expected a redis://, rediss://, unix:// or sentinel:// URL"
    if not isinstance(value, str):
        raise ConfigurationError(f"{expected}, got a {type(value).__name__}")
    parts = [part.strip() for part in value.split(";")] if value.startswith("sentinel://") else [value]
    for part in parts:
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", part)
        allowed = ("sentinel",) if len(parts) > 1 else ("redis", "rediss", "unix", "sentinel")
        if scheme is None or scheme.group(1) not in allowed:
            got = f"a {scheme.group(1)}:// URL" if scheme else "no URL scheme"
            where = " in a ;-separated list of sentinel:// URLs" if len(parts) > 1 else ""
            raise ConfigurationError(f"{expected}, got {got}{where}")
        problem = url_problem(part)
        if problem:
            raise ConfigurationError(f"{PREFIX}{key}: {problem}")
    return value


def url_problem(url: str) -> str | None:
    """What redis-py would refuse in a URL's port or database number, in words."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return None
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        shown = parts.netloc.rpartition(":")[2]
        # Only digits are shown: a non-number there may be a password whose '@host' is missing.
        got = f", got {shown}" if shown.isdigit() else ""
        example = f"{parts.scheme}://localhost:{26379 if parts.scheme == 'sentinel' else 6379}/0"
        return f"the port must be a number from 1 to 65535{got} (e.g. {example})"
    db = unquote(parts.path).strip("/")
    if db and not db.isdigit():
        return f"the database after the host must be a number (e.g. {parts.scheme}://localhost:6379/0)"
    return None


def prefix(key: str, value: Any) -> str:
    # Braces would break the Redis Cluster hash tag that keeps a shard in one slot.
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.:\-]{1,64}", value):
        raise _fail(key, value, "1-64 characters of letters, digits, '_', '.', ':' or '-'")
    return value


def names(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple, set, frozenset)) or not value:
        raise _fail(key, value, "a non-empty list of serializer names")
    if not all(isinstance(item, str) and item for item in value):
        raise _fail(key, value, "a non-empty list of serializer names")
    return tuple(sorted(value))


def options(key: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _fail(key, value, "a mapping of redis client keyword arguments")
    return dict(value)


def optional_name(key: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail(key, value, "a name (the master's name in the sentinels' configuration)")
    return value.strip()


def optional_port(key: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    return int(int_range(0, 65535)(key, value))


def host(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(key, value, "a host name or address")
    return value


def bool_(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise _fail(key, value, "true or false")


def fast_path(key: str, value: Any) -> str:
    # "auto" (and True): on when detected; False/"false"/"off": never.
    if value is True or (isinstance(value, str) and value.strip().lower() in ("auto", "true", "on", "yes", "1")):
        return "auto"
    if value is False or (isinstance(value, str) and value.strip().lower() in ("false", "off", "no", "0")):
        return "off"
    raise _fail(key, value, "'auto' or False")


def internals(key: str, value: Any) -> str:
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("auto", "public"):
        return text
    raise _fail(key, value, "'auto' or 'public'")


def cluster(key: str, value: Any) -> str:
    text = str(value).strip().lower() if isinstance(value, (str, bool, int)) else None
    if text in ("auto",):
        return "auto"
    if text in ("1", "true", "yes", "on"):
        return "true"
    if text in ("0", "false", "no", "off"):
        return "false"
    raise _fail(key, value, "'auto', true or false")
