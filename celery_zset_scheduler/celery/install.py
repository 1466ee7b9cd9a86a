"""``install(app)``: the one line that sends an app's timed tasks to the store."""

from __future__ import annotations

from typing import Any

from celery.utils.imports import symbol_by_name

from . import unknown
from .amqp import ZSetAMQP, ZSetAMQPMixin, ZSetControl, ZSetControlMixin
from .installation import Installation, ensure_installation
from .sender import wrap_sender

_DEFAULT_AMQP = "celery.app.amqp:AMQP"
_DEFAULT_CONTROL = "celery.app.control:Control"
_OURS_AMQP = "celery_zset_scheduler.celery.amqp:ZSetAMQP"
_OURS_CONTROL = "celery_zset_scheduler.celery.amqp:ZSetControl"


def install(app: Any, **overrides: Any) -> Installation:
    """Make ``apply_async(countdown=/eta=)``, ``send_task(eta=)`` and ``retry(countdown=)`` of
    ``app`` store the task, and ``revoke`` cancel stored ones.

    Cheap and side-effect free: no connection, thread or configuration read until first use.
    Calling it again (or on other apps) is safe. ``overrides`` take precedence over the app's
    ``zset_scheduler_*`` settings (``install(app, shards=4)``).
    """
    inst = ensure_installation(app, overrides)
    unknown.connect()
    if "amqp" in app.__dict__:  # already built: wrap its sender in place
        amqp = app.amqp
        if not getattr(amqp.send_task_message, "__wrapped__", None):
            amqp.send_task_message = wrap_sender(app, amqp.send_task_message)
    else:
        app.amqp_cls = _subclass(app.amqp_cls, _DEFAULT_AMQP, _OURS_AMQP, ZSetAMQPMixin)
    if "control" in app.__dict__:
        control = app.control
        if not isinstance(control, ZSetControlMixin):
            control.__class__ = _subclass_of(type(control), ZSetControlMixin)
    else:
        app.control_cls = _subclass(app.control_cls, _DEFAULT_CONTROL, _OURS_CONTROL, ZSetControlMixin)
    return inst


def _subclass(current: Any, default: str, ours: str, mixin: type) -> Any:
    """Our class for Celery's default (by name, so the app stays picklable), else a subclass."""
    if current in (default, ours):
        return ours
    cls = symbol_by_name(current) if isinstance(current, str) else current
    if cls is symbol_by_name(default):
        return ours
    return _subclass_of(cls, mixin)


_subclasses: dict[tuple[type, type], type] = {}


def _subclass_of(cls: type, mixin: type) -> type:
    if issubclass(cls, mixin):
        return cls
    made = _subclasses.get((cls, mixin))
    if made is None:  # one subclass per class, so isinstance checks stay stable
        made = _subclasses[(cls, mixin)] = type(f"ZSet{cls.__name__}", (mixin, cls), {"__module__": __name__})
    return made


__all__ = ["ZSetAMQP", "ZSetControl", "install"]
