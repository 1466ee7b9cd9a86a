"""Every action of the pages in Django's admin log: who, what, which ids (or which selection)."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import HttpRequest

__all__ = ["ADDITION", "CHANGE", "DELETION", "log", "log_each"]

REPR_LENGTH = 200  # LogEntry.object_repr's max_length


def log(request: HttpRequest, model: type[models.Model], flag: int,
        objects: Iterable[tuple[str | None, str]], message: str) -> int:
    """One admin-log entry per ``(object id, description)``; id None for a selection by filters.

    Written with ``bulk_create``, directly: the objects live in Redis, not in model instances that
    ``ModelAdmin.log_change`` could take.
    """
    return log_each(request, model, flag, ((object_id, text, message) for object_id, text in objects))


def log_each(request: HttpRequest, model: type[models.Model], flag: int,
             objects: Iterable[tuple[str | None, str, str]]) -> int:
    """As :func:`log`, with a message of each object's own ``(object id, description, message)``."""
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    user_id = getattr(request.user, "pk", None)
    entries = [
        LogEntry(user_id=user_id, content_type_id=content_type.pk, object_id=object_id,
                 object_repr=text[:REPR_LENGTH], action_flag=flag, change_message=message)
        for object_id, text, message in objects
    ]
    LogEntry.objects.bulk_create(entries)
    return len(entries)
