"""What every command prints: tables for people, JSON for scripts, one-line errors, exit codes."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import IntEnum
from typing import Any

import click
import redis

from ...errors import ZSetSchedulerError
from ...model.urls import mask_url


class ExitCode(IntEnum):
    """Exit codes of ``celery zset`` commands (documented in docs/cli.md, ``celery zset docs``)."""

    OK = 0
    ERROR = 1  # Redis unreachable, bad configuration, unexpected error
    USAGE = 2  # bad options or arguments (click's own code)
    NOT_FOUND = 3  # some ids are unknown, or not in a state the command can act on
    ABORTED = 4  # the confirmation was refused: nothing was changed
    CHECK_FAILED = 5  # doctor: at least one check failed


class CommandError(click.ClickException):
    """An error printed as one ``Error: ...`` line, with its exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.ERROR) -> None:
        super().__init__(" ".join(message.split()))
        setattr(self, "exit_code", int(code))  # noqa: B010 (a class variable on ClickException)


def one_line(exc: BaseException, url: str | None = None) -> str:
    """A one-line explanation of an unexpected error."""
    where = f" at {mask_url(url)}" if url else ""
    if isinstance(exc, redis.AuthenticationError):  # first: it is a ConnectionError too
        return f"Redis{where} refused the credentials: {exc}"
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return f"cannot reach Redis{where}: {exc}"
    if isinstance(exc, redis.RedisError):
        return f"Redis{where} error: {exc}"
    if isinstance(exc, ZSetSchedulerError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


# A lone surrogate (an id given on the command line as bytes that are not UTF-8) cannot be written
# to stdout: it is shown as its escape, in JSON and in tables.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(text: str) -> str:
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def emit_json(data: Any) -> None:
    click.echo(_escaped(json.dumps(data, indent=2, sort_keys=False, default=str, ensure_ascii=False)))


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, right: Sequence[int] = (),
    style: Callable[[int, str, str], str] | None = None,
) -> str:
    """Columns padded to their widest cell; the columns listed in ``right`` are right-aligned.

    ``style(column, raw, padded)`` may colour a body cell after padding, so widths stay right.
    """
    cells = [[str(h) for h in headers]] + [["-" if c is None else _escaped(str(c)) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        parts = []
        for i, (c, w) in enumerate(zip(row, widths, strict=True)):
            padded = c.rjust(w) if i in right else c.ljust(w)
            parts.append(style(i, c, padded) if style is not None and n > 0 else padded)
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def duration(ms: float | None) -> str:
    """``950ms``, ``12s``, ``3m10s``, ``2h05m``, ``4d02h``."""
    if ms is None:
        return "-"
    ms = abs(ms)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{int(ms)}ms"
    s = int(ms // 1000)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def relative(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    delta = ms - now_ms
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def number(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n:,}" if isinstance(n, int) else f"{n:,.2f}"


def confirm(yes: bool, question: str) -> None:
    """Ask before a destructive operation; a refusal (or no answer) exits with ABORTED."""
    if yes:
        return
    try:
        agreed = click.confirm(question, default=False, err=True)
    except click.Abort:
        agreed = False
    if not agreed:
        raise CommandError("aborted: nothing was changed (pass --yes to skip the question)", ExitCode.ABORTED)


@contextmanager
def progress(total: int | None, label: str, *, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; otherwise a no-op ``update(n)``."""
    if not enabled or not sys.stderr.isatty():
        yield lambda n: None
        return
    bar: Any
    with click.progressbar(length=total, label=label, file=sys.stderr, show_pos=True) as bar:
        yield bar.update


def results(action: str, outcome: Mapping[str, str], extra: Mapping[str, Mapping[str, Any]] | None = None,
            *, counts: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The JSON of an action on ids: one result per id, and counts of each status."""
    rows = [{"id": i, "status": s, **(extra or {}).get(i, {})} for i, s in outcome.items()]
    tally: dict[str, int] = dict(counts or {})
    if counts is None:
        for s in outcome.values():
            tally[s] = tally.get(s, 0) + 1
    return {"action": action, "results": rows, "counts": tally}


def print_results(data: Mapping[str, Any], as_json: bool, *, ok: Sequence[str]) -> None:
    """Print an action's outcome; exit NOT_FOUND when some entry did not end in an ``ok`` status."""
    if as_json:
        emit_json(data)
    else:
        # The new due time of a moved task (reschedule, run-now) is shown, not only in JSON.
        due = any("due" in r for r in data["results"])
        rows = [(r["id"], r["status"], *([r.get("due")] if due else [])) for r in data["results"]]
        if rows:
            click.echo(table(["ID", "STATUS", *(["DUE"] if due else [])], rows))
        summary = ", ".join(f"{number(n)} {s}" for s, n in data["counts"].items()) or "nothing to do"
        click.echo(f"{data['action']}: {summary}")
    if any(n and status not in ok for status, n in data["counts"].items()):
        click.get_current_context().exit(int(ExitCode.NOT_FOUND))
