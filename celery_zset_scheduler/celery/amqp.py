"""AMQP and Control subclasses that put the store in front of Celery's own behaviour.

``install(app)`` points ``app.amqp_cls``/``app.control_cls`` at these (or at a subclass of the
user's own classes) before they are instantiated, so installing reads no configuration and opens
no connection: the wrapped sender is built when Celery first builds its own.
"""

from __future__ import annotations

from typing import Any

from celery.app.amqp import AMQP
from celery.app.control import Control
from kombu.utils.objects import cached_property

from .installation import installation_for
from .sender import wrap_sender


class ZSetAMQPMixin:
    app: Any

    @cached_property
    def send_task_message(self) -> Any:
        return wrap_sender(self.app, self._create_task_sender())  # type: ignore[attr-defined]


class ZSetControlMixin:
    app: Any

    def revoke(self, task_id: Any, destination: Any = None, terminate: bool = False,
               signal: Any = None, **kwargs: Any) -> Any:
        """Cancel stored entries first, then broadcast as Celery does (for running tasks)."""
        cancel_stored(self.app, task_id)
        extra = {} if signal is None else {"signal": signal}
        return super().revoke(  # type: ignore[misc]
            task_id, destination=destination, terminate=terminate, **extra, **kwargs
        )


def cancel_stored(app: Any, task_id: Any) -> dict[str, str]:
    inst = installation_for(app)
    if inst is None:
        return {}
    ids = [task_id] if isinstance(task_id, str) else [str(t) for t in task_id]
    return dict(inst.store.cancel(ids))


class ZSetAMQP(ZSetAMQPMixin, AMQP):
    pass


class ZSetControl(ZSetControlMixin, Control):
    pass
