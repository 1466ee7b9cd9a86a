"""Exceptions raised by celery-zset-scheduler.

They all derive from :class:`ZSetSchedulerError`, so callers can catch the family, and each
also derives from the builtin a caller would naturally expect (``ValueError`` for bad settings,
``TypeError`` for arguments that cannot be serialized).
"""

from __future__ import annotations


class ZSetSchedulerError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigurationError(ZSetSchedulerError, ValueError):
    """A ``zset_scheduler_*`` setting is unknown or has an invalid value."""


class ShardCountMismatch(ConfigurationError):
    """The store was created with another shard count or format than this client expects."""


class NotSerializable(ZSetSchedulerError, TypeError):
    """A task's arguments cannot be encoded with the serializer the store accepts."""


class InvalidId(ZSetSchedulerError, ValueError):
    """A task id or idempotency key that cannot be stored: Redis needs it as UTF-8, and a lone
    surrogate (e.g. from bytes decoded with ``surrogateescape``) has no UTF-8 form."""


class StoreUnavailable(ZSetSchedulerError):
    """The store's Redis could not be reached (or refused the credentials) while scheduling."""


class PermissionRefused(StoreUnavailable):
    """The store's Redis user lacks a permission (an ACL rule) the call needs; the message names
    what was refused and the rule that grants it. The user's permissions are asked before a
    process's first write, so nothing is written halfway (except on servers that cannot be asked,
    before Redis 7, or when a permission is taken away while the process runs)."""


class NotReplicated(StoreUnavailable):
    """A write reached the store's master but fewer replicas than ``zset_scheduler_wait_replicas``
    acknowledged it in time: it is stored, and would be lost if that master failed right now."""


class PoisonMessage(ZSetSchedulerError):
    """A stored entry cannot be decoded; it goes to the dead-letter store instead of crash-looping."""
