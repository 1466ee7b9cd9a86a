"""Private internals of other libraries that a fast path reads, each checked once per process.

A few hot paths read attributes that redis-py or Kombu do not promise to keep (the reply
reader's socket, Kombu's queue names and envelope steps, its serializer table). Each such use is
an :class:`Internal`: what it reads, what taking the public path instead costs, and a check that
says, without connecting anywhere, whether this process's release has them as expected. The first
:func:`usable` decides (every installation runs :func:`check_all` when it reads its settings, and
a dispatcher when it starts); a check that fails logs one WARNING naming the cost, and that fast
path is not taken in this process. ``zset_scheduler_internals = "public"`` in any installed app
makes the whole process take the public paths (:func:`force_public`). docs/design.md lists each
internal with its check and the benchmark figure of what it saves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .logs import log_event

#: A check returns None when everything it reads is as expected, else what differs, in words.
Check = Callable[[], "str | None"]


@dataclass(frozen=True)
class Internal:
    name: str  # the fast path it enables
    reads: tuple[str, ...]  # the private names, as ``module.Class.attribute``
    public: str  # what runs instead, and what that costs
    check: Check


_registry: dict[str, Internal] = {}
_decided: dict[str, bool] = {}
_forced = False
_lock = threading.Lock()


def register(item: Internal) -> Internal:
    _registry[item.name] = item
    return item


def usable(item: Internal) -> bool:
    """Whether the fast path of ``item`` may be taken in this process (decided on the first call)."""
    if _forced:
        return False
    decided = _decided.get(item.name)
    return _decide(item) if decided is None else decided


def _decide(item: Internal) -> bool:
    with _lock:
        if _forced:
            return False
        if item.name in _decided:
            return _decided[item.name]
        try:
            problem = item.check()
        except Exception as exc:  # a check that cannot even run: the internal is not as expected
            problem = f"{type(exc).__name__}: {exc}"
        _decided[item.name] = problem is None
    if problem is not None:
        log_event(logging.WARNING, "internals.public", internal=repr(item.name), differs=repr(problem),
                  reads=",".join(item.reads), instead=repr(item.public))
    return problem is None


def check_all() -> dict[str, bool]:
    """Decide every registered internal now (at start-up, so that a WARNING comes then)."""
    return {name: usable(item) for name, item in list(_registry.items())}


def force_public(why: str) -> None:
    """Take every public path from now on in this process (logged once)."""
    global _forced
    with _lock:
        if _forced:
            return
        _forced = True
    log_event(logging.INFO, "internals.forced_public", why=repr(why),
              internals=",".join(repr(name) for name in _registry))


def turn_off(item: Internal) -> None:
    """Take ``item``'s public path from now on in this process, silently (a benchmark that
    measures what one internal saves)."""
    with _lock:
        _decided[item.name] = False


def forced() -> bool:
    return _forced


def registered() -> list[Internal]:
    return list(_registry.values())


def reset() -> None:
    """Forget every decision and the forcing (tests that compare both paths in one process)."""
    global _forced
    with _lock:
        _decided.clear()
        _forced = False
