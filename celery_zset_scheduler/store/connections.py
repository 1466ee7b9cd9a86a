"""A connection taken from a redis-py pool for commands written and read by hand.

redis-py 5.0 requires a command name in ``ConnectionPool.get_connection`` (it only chooses nothing
by it); from 5.3 the name is deprecated and the call takes none. Which form applies is read once
from the signature, so no call warns and none fails.
"""

from __future__ import annotations

import inspect
from typing import Any

_NEEDS_NAME: dict[type, bool] = {}


def _needs_name(pool_type: Any) -> bool:
    known = _NEEDS_NAME.get(pool_type)
    if known is None:
        try:
            parameter = inspect.signature(pool_type.get_connection).parameters.get("command_name")
        except (TypeError, ValueError):
            parameter = None
        known = _NEEDS_NAME[pool_type] = parameter is not None and parameter.default is inspect.Parameter.empty
    return known


def checkout(pool: Any) -> Any:
    """A connection from ``pool``: give it back with ``pool.release(conn)``."""
    if _needs_name(type(pool)):
        return pool.get_connection("EVALSHA")
    return pool.get_connection()
