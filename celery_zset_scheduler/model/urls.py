"""Redis (and broker) URLs as they may be shown to people: never with a password.

A password can sit in the user-info (``redis://user:pw@host``, ``redis://:pw@host``, or a lone
``redis://pw@host``, which old clients read as a password), or in the query string
(``?password=``, as redis-py accepts for every scheme, ``unix://`` included). A broker URL may be a
``;``-separated failover list, or a list. Passwords are often not percent-encoded, so a URL whose
``@`` could belong to a password (one outside the user-info) is masked whole rather than guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"
UNPARSEABLE = "<URL not shown: it cannot be parsed>"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://(.*)\Z", re.DOTALL)
# Query parameters whose value is a secret (password, ssl_password, sentinel_password, token...).
_SECRET_PARAM = re.compile(r"pass|secret|token|auth|credential|key(?!file)", re.IGNORECASE)


def mask_url(url: str | Sequence[str] | None) -> str:
    """The URL without its password, for messages and logs; every URL of a failover list masked."""
    if url is None:
        return "None"
    if not isinstance(url, str):
        return ";".join(mask_url(str(part)) for part in url)
    return ";".join(_mask_one(part.strip()) for part in url.split(";"))


def _mask_one(url: str) -> str:
    matched = _SCHEME.match(url)
    if matched is None:
        return UNPARSEABLE
    scheme, rest = matched.groups()
    # The authority ends at the first '/', '?' or '#', as redis-py's urlparse reads it.
    end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        # The user name stays (it helps, and is not secret); a lone user-info may be a password.
        authority = f"{userinfo.split(':', 1)[0]}:{MASK}@" if ":" in userinfo else f"{MASK}@"
    else:
        host, authority = authority, ""
    authority += _mask_port(host)
    path, query, fragment = _split_tail(tail)
    if query is not None:
        query = _mask_query(query)
    masked_tail = path + ("" if query is None else "?" + query) + ("" if fragment is None else "#" + fragment)
    if "@" in path or "@" in (fragment or "") or (query is not None and "@" in query):
        # An '@' after the authority: part of the user-info may sit there (an unencoded '/', '?' or
        # '#' in a password). Only the scheme is certain not to be secret.
        return f"{scheme}://{MASK}"
    return f"{scheme}://{authority}{masked_tail}"


def _mask_port(host: str) -> str:
    # A port that is not a number may be a password whose '@host' was forgotten: not shown.
    name, colon, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if colon and port and not port.isdigit():
        return f"{name}:{MASK}"
    return host


def _split_tail(tail: str) -> tuple[str, str | None, str | None]:
    fragment = None
    if "#" in tail:
        tail, fragment = tail.split("#", 1)
    query = None
    if "?" in tail:
        tail, query = tail.split("?", 1)
    return tail, query, fragment


def _mask_query(query: str) -> str:
    parts = []
    for pair in query.split("&"):
        name = pair.split("=", 1)[0]
        parsed = parse_qsl(pair, keep_blank_values=True)
        key = parsed[0][0] if parsed else name
        parts.append(f"{name}={MASK}" if "=" in pair and _SECRET_PARAM.search(key) else pair)
    return "&".join(parts)


@dataclass(frozen=True)
class SentinelURL:
    """What a ``sentinel://`` URL (Kombu's form) names: the sentinels, and the master's database
    and credentials (from the first URL of the list, as Kombu reads them)."""

    sentinels: tuple[tuple[str, int], ...]
    db: int
    username: str | None
    password: str | None


SENTINEL_PORT = 26379


def is_sentinel_url(url: str) -> bool:
    return url.strip().lower().startswith("sentinel://")


def parse_sentinel_url(url: str) -> SentinelURL:
    """``sentinel://[user:pw@]host[:port][/db]``, several ``;``-separated; raises ValueError
    (without the URL, which may hold a password) on anything else."""
    parts = [p.strip() for p in url.split(";") if p.strip()]
    if not parts:
        raise ValueError("no sentinel in the URL")
    sentinels: list[tuple[str, int]] = []
    for part in parts:
        split = urlsplit(part)
        if split.scheme.lower() != "sentinel":
            raise ValueError(f"every URL of a sentinel list must be sentinel://, got {split.scheme or 'none'}://")
        try:
            port = split.port or SENTINEL_PORT
        except ValueError:
            raise ValueError("a sentinel's port must be a number from 1 to 65535") from None
        if not split.hostname:
            raise ValueError("a sentinel URL needs a host (sentinel://host:26379)")
        sentinels.append((split.hostname, port))
    first = urlsplit(parts[0])
    db_text = unquote(first.path).strip("/") or dict(parse_qsl(first.query)).get("db", "0")
    if not db_text.isdigit():
        raise ValueError("the database after the sentinel's host must be a number (sentinel://host:26379/0)")
    username = unquote(first.username) if first.username else None
    password = unquote(first.password) if first.password is not None else None
    return SentinelURL(tuple(sentinels), int(db_text), username, password)
