"""A permission the store's Redis user lacks: a configuration problem, reported as one.

An ACL user without a command, key or channel gets ``NOPERM`` for it every time: retried as an
outage it would be logged several times a second for as long as the process runs. The process
goes on with what it may do, and :func:`report_refused` logs the cause with the rule that would
grant it, at most once a minute for the same cause.
"""

from __future__ import annotations

import logging
import re
import threading
import time

import redis

from ..model.logs import describe, log_event
from .scripts import sources

#: The same cause is logged again at most this often (seconds).
REPEAT_AFTER_S = 60.0

_last: dict[str, float] = {}
_lock = threading.Lock()


# A refused MULTI shows only as the EXEC that follows it failing.
_NO_MULTI = "EXEC without MULTI"
# Redis 7 and Valkey say what a script was refused by the script's SHA and line.
_IN_SCRIPT = "The user executing the script can't"
_SAID = re.compile(f"no permissions to|{_NO_MULTI}|{_IN_SCRIPT}")
_SCRIPT_LINE = re.compile(r"script: ([0-9a-f]{40}), on @user_script:(\d+)")
_PIPELINE_COMMAND = re.compile(r"Command # \d+ \([A-Za-z]+ (\S+)")
#: A command a Lua script runs (``redis.call('HGET', ...)``), as written in the script's source.
SCRIPT_CALL = re.compile(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]")
_COMMAND = re.compile(r"permissions to run the '([^']+)' command")
_KEY = re.compile(r"permissions to access (?:a|one of the) key")
_CHANNEL = re.compile(r"permissions to access (?:a|one of the) channel")


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing a permission (``NOPERM``), or was caused by one: Redis
    6.2 reports one met inside a script as a script error, Kombu wraps one met while connecting
    in its ``OperationalError``; the words are Redis's in each."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, redis.exceptions.NoPermissionError) or _SAID.search(str(seen)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def refusal(exc: BaseException, keys: str = "", channels: str = "") -> tuple[str, str]:
    """What ``exc`` says was refused and the ACL rule that grants it. Redis names a refused
    command but not a refused key or channel: ``keys`` and ``channels`` are the rules the caller
    needed (e.g. ``~zset:* ~{zset:*``)."""
    text = str(exc)
    command = _COMMAND.search(text)
    if command:
        name = command.group(1).lower()
        return f"the {name.upper()} command", f"+{name}"
    if _IN_SCRIPT in text and "run this command" in text:
        name = _script_command(text)
        if name:
            return f"the {name.upper()} command (in a script)", f"+{name}"
    if _NO_MULTI in text:
        return "the MULTI command", "+multi"
    if _KEY.search(text) or (_IN_SCRIPT in text and " key" in text):
        named = _PIPELINE_COMMAND.search(text)  # redis-py names a pipeline's command and key
        if named:
            return f"the key {named.group(1)}", f"~{glob_escape(named.group(1))} ({keys or 'a key pattern'})"
        return "a key", keys or "~<the key pattern>"
    if _CHANNEL.search(text) or (_IN_SCRIPT in text and " channel" in text):
        return "a channel", channels or "&<the channel>"
    return "a permission", "see `celery zset acl`"


def report_refused(what: str, grant: str, exc: BaseException | None, instead: str) -> None:
    """Log that ``what`` was refused, the ACL rule that would grant it, and what the process does
    ``instead``; once a minute at most for the same ``what``."""
    now = time.monotonic()
    with _lock:
        last = _last.get(what)
        if last is not None and now - last < REPEAT_AFTER_S:
            return
        _last[what] = now
    error = {} if exc is None else {"error": describe(exc)}
    log_event(logging.WARNING, "config.refused", what=what, grant=grant, instead=instead, **error)


def glob_escape(text: str) -> str:
    """``text`` matched literally by a Redis glob (ACL key and channel patterns)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _script_command(text: str) -> str | None:
    """The command on the line of one of our scripts that an error names (by SHA and line)."""
    where = _SCRIPT_LINE.search(text)
    if where is None:
        return None
    for source in sources().values():
        if source.sha == where.group(1):
            lines = source.text.splitlines()
            index = int(where.group(2)) - 1
            call = SCRIPT_CALL.search(lines[index]) if 0 <= index < len(lines) else None
            return call.group(1).lower() if call else None
    return None
