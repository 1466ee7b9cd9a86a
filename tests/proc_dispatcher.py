"""A dispatcher process that stops itself at a chosen point of the hand-over, for crash tests.

    python -m tests.proc_dispatcher claimed    # SIGSTOP itself after a claim, before publishing
    python -m tests.proc_dispatcher published  # SIGSTOP itself after publishing, before the ack

It prints ``PAUSED <point> <json ids of the batch in hand>`` first, so the test knows the batch,
then kills it (-9) or resumes it (SIGCONT). Only the test drives it: the product has no such hook.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import Any

from celery_zset_scheduler.celery.runner import build_dispatcher
from celery_zset_scheduler.dispatcher import Dispatcher

from .proc_app import app


def pause(point: str, ids: list[str]) -> None:
    print(f"PAUSED {point} {json.dumps(ids)}", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def hook(dispatcher: Dispatcher, point: str) -> None:
    paused = False
    hand_over, ack = dispatcher._hand_over, dispatcher._ack

    def hand_over_then_maybe_pause(entries: list[Any], claimed_at: float) -> None:
        nonlocal paused
        if point == "claimed" and not paused:
            paused = True
            pause(point, [e.task_id for e in entries])
        hand_over(entries, claimed_at)

    def pause_then_ack(entries: list[Any]) -> None:
        nonlocal paused
        if point == "published" and not paused and entries:
            paused = True
            pause(point, [e.task_id for e in entries])
        ack(entries)

    dispatcher._hand_over = hand_over_then_maybe_pause  # type: ignore[method-assign]
    dispatcher._ack = pause_then_ack  # type: ignore[method-assign]


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(message)s")
    dispatcher = build_dispatcher(app)
    hook(dispatcher, sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: dispatcher.stop())
    print(f"MEMBER {dispatcher.member_id}", flush=True)
    dispatcher.run()


if __name__ == "__main__":
    main()
