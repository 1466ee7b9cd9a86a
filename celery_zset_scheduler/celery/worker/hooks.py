"""What an installed app's worker does differently, hooked on Celery's signals by ``install(app)``.

Nothing here replaces a task class, a Request class or a bootstep of the user's:

- ``task_received`` (the worker's main process, for every task message, before Celery decides
  whether to hold it for its ETA): a message that waited in the store shows its ETA as
  ``self.request.eta`` again (the dispatcher published it under ``zset_eta``, so the worker does
  not hold it: the store already waited, by Redis time), and the request is given
  :class:`~.request.DeadLettering` so that a final failure reaches the dead-letter store.
- ``task_prerun`` (where the task runs): ``self.request.headers`` loses the headers only the
  plugin writes (``zset_eta``, ``zset_first_failure``), so it is what plain Celery's shows.
- ``task_unknown``: a message for a task name this worker does not know is dead-lettered
  (:mod:`.unknown`); Celery would discard it.
- ``worker_init``: registers the ``zset_plugin`` remote-control (inspect) command, which
  ``celery zset doctor`` broadcasts to find the workers that run without the plugin.

Each handler acts only for apps that were installed, so other apps in the process are unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from ...model.headers import FIRST_FAILURE, ZSET_ETA
from ...model.logs import log_event
from ..core.state import Installation, installation_for
from . import unknown

#: Headers a task's ``self.request.headers`` does not show (plain Celery never writes them).
HIDDEN_HEADERS = (ZSET_ETA, FIRST_FAILURE)
#: The remote-control command an installed worker answers (``celery inspect zset_plugin``).
CONTROL_COMMAND = "zset_plugin"


def dead_lettering(task: Any, inst: Installation) -> bool:
    """A task's own ``dead_letter`` (True/False) wins; otherwise ``zset_scheduler_dead_letters``."""
    own = getattr(task, "dead_letter", None)
    return bool(own) if own is not None else inst.settings.dead_letters


def on_task_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    task = getattr(request, "task", None)
    inst = installation_for(getattr(task, "app", None)) if task is not None else None
    if inst is None:
        return
    fields = request.request_dict
    moved = fields.pop(ZSET_ETA, None)
    if moved and not fields.get("eta"):
        # Seen by the task only: Celery parsed the (cleared) header already, so it runs now.
        fields["eta"] = moved
    if dead_lettering(task, inst):
        from .request import with_dead_letters

        request.__class__ = with_dead_letters(type(request))


def on_task_prerun(sender: Any = None, task: Any = None, **_: Any) -> None:
    """``self.request.headers`` as plain Celery gives it: without the headers only the plugin
    writes (a retry's first failure stays readable as the request's attribute, where the next
    retry finds it)."""
    if installation_for(getattr(task, "app", None)) is None:
        return
    request = task.request
    headers = getattr(request, "headers", None)
    if headers and any(name in headers for name in HIDDEN_HEADERS):
        request.headers = {k: v for k, v in headers.items() if k not in HIDDEN_HEADERS} or None


def on_worker_init(sender: Any = None, **_: Any) -> None:
    from celery.worker.control import Panel, inspect_command

    if CONTROL_COMMAND not in Panel.data:
        inspect_command(name=CONTROL_COMMAND)(zset_plugin)


def zset_plugin(state: Any, **_: Any) -> dict[str, Any]:
    """Whether this worker's app has celery-zset-scheduler installed, and its store prefix."""
    from ...version import __version__

    inst = installation_for(state.app)
    if inst is None:
        return {"installed": False, "version": __version__}
    try:
        prefix: str | None = inst.settings.prefix
    except Exception as exc:  # a configuration error: report it instead of failing the reply
        log_event(logging.ERROR, "settings.invalid", error=str(exc))
        prefix = None
    return {"installed": True, "version": __version__, "prefix": prefix}


def connect() -> None:
    """Idempotent: the handlers are connected once per process, for every installed app."""
    signals.task_received.connect(on_task_received, weak=False, dispatch_uid="celery_zset_scheduler.received")
    signals.task_prerun.connect(on_task_prerun, weak=False, dispatch_uid="celery_zset_scheduler.prerun")
    signals.worker_init.connect(on_worker_init, weak=False, dispatch_uid="celery_zset_scheduler.worker_init")
    unknown.connect()
