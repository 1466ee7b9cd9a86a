"""The smoke suite's tasks, copied into the worker container by pytest-celery."""

from __future__ import annotations

import time

from celery import shared_task


@shared_task(name="zsmoke.stamp")
def stamp(tag: str) -> dict[str, object]:
    return {"tag": tag, "at": time.time()}
