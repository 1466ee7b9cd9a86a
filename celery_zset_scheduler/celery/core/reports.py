"""Celery's own reports mask the store URL of an installed app.

``celery report``, ``app.conf.humanize()``/``table()`` and ``celery inspect conf`` print the
configuration with settings masked *by name* (``celery.app.utils.HIDDEN_SETTINGS``: ``PASS``,
``SECRET``, ``KEY``... and the broker and backend URLs). ``zset_scheduler_url`` matches none of
them, so its password would be printed. All three go through ``Settings.table``: it is wrapped
once, and the wrapper masks our URL only in the configuration of an app that is installed; other
apps' reports stay exactly Celery's.
"""

from __future__ import annotations

import functools
from typing import Any

from celery.app import utils as app_utils

from ...model.urls import mask_url
from ...settings import PREFIX
from .state import installed_conf

_STORE_URL = PREFIX + "url"
_MARK = "_zset_masks_store_url"


def mask_store_url_in_reports() -> None:
    """Wrap ``Settings.table`` (idempotent: once per process, whatever the number of apps)."""
    original = app_utils.Settings.table
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def table(self: Any, with_defaults: bool = False, censored: bool = True) -> Any:
        settings = original(self, with_defaults, censored)
        if censored and installed_conf(self):
            for key, value in settings.items():
                # Django's namespace too: CELERY_ZSET_SCHEDULER_URL.
                if isinstance(key, str) and key.lower().endswith(_STORE_URL) and isinstance(value, str):
                    settings[key] = mask_url(value)
        return settings

    setattr(table, _MARK, True)
    app_utils.Settings.table = table
