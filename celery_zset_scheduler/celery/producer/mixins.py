"""What ``install(app)`` mixes into the app's AMQP and Control classes: the timed sender, revokes.

The producer's hooks in Celery's own classes (:mod:`..install` makes the subclasses):
``send_task_message`` goes through the store's sender, every revoke broadcast cancels or records
its ids in the store first, and broker connections to a ``redis://`` broker use this package's
transport (:mod:`..transport`).
"""

from __future__ import annotations

from typing import Any

from kombu.utils.objects import cached_property

from ..transport import choose
from .revokes import revoke_for_command
from .sender import wrap_sender


class ZSetAMQPMixin:
    app: Any

    def Connection(self, url: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Celery's broker connections, on this package's Redis transport for a ``redis://`` broker."""
        return choose.connection(self.app, url, *args, **kwargs)

    @cached_property
    def send_task_message(self) -> Any:
        # Celery's own (a cached property too: it stores its sender, which this one then replaces).
        return wrap_sender(self.app, super().send_task_message)  # type: ignore[misc]


class ZSetControlMixin:
    app: Any

    def broadcast(self, command: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Every revoke (``revoke``, ``terminate``, ``AsyncResult.revoke``, the ``celery control``
        CLI) ends here: cancel or record the ids in the store first, then broadcast as Celery does."""
        ids = kwargs["task_id"] if "task_id" in kwargs else (arguments or {}).get("task_id")
        revoke_for_command(self.app, command, {"task_id": ids})
        return super().broadcast(command, arguments, *args, **kwargs)  # type: ignore[misc]
