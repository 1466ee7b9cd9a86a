"""A dispatcher process that stops itself at a chosen point of the hand-over, for crash tests.

    python -m tests.support.proc_dispatcher claimed    # SIGSTOP itself after a claim, before publishing
    python -m tests.support.proc_dispatcher claimed_ahead  # the same, at a claim decoded with the next one sent
    python -m tests.support.proc_dispatcher handing    # SIGSTOP itself inside the hand-off, at the publish call
    python -m tests.support.proc_dispatcher published  # SIGSTOP itself after publishing, before the ack
    python -m tests.support.proc_dispatcher before_push  # fast path: right before the script runs
    python -m tests.support.proc_dispatcher after_push   # fast path: the script ran, its reply unread

It prints ``PAUSED <point> <json ids of the batch in hand>`` first, so the test knows the batch
(and, at a publish, ``BUILT <n>``: how many of its envelopes the claim script built),
then kills it (-9) or resumes it (SIGCONT). Only the test drives it: the product has no such hook.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import Any

from celery_zset_scheduler.celery.dispatcher.build import build_dispatcher
from celery_zset_scheduler.dispatch.loop import Dispatcher

from .proc_app import app


def pause(point: str, ids: list[str]) -> None:
    print(f"PAUSED {point} {json.dumps(ids)}", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)


def hook(dispatcher: Dispatcher, point: str) -> None:
    """Pause between the generic hand-off's steps: after the claim (before decoding and
    publishing), or after the publish (before the ack, which rides on the next claim)."""
    handoff: Any = dispatcher.handoff
    paused = False
    decode, publish = handoff._decode, handoff.publisher.publish

    def pause_then_decode(entries: list[Any], claimed_at: float) -> Any:
        nonlocal paused
        ahead = getattr(handoff, "_ahead", None) is not None
        wanted = point == "claimed" or (point == "claimed_ahead" and ahead)
        if wanted and not paused and any(claimed for claimed, _ in entries):
            paused = True
            print(f"AHEAD {ahead}", flush=True)
            pause(point, [e.task_id for claimed, _ in entries for e in claimed])
        return decode(entries, claimed_at)

    def pausing(publish: Any) -> Any:
        def publish_then_pause(batch: list[Any], guard: Any) -> Any:
            nonlocal paused
            if point in ("handing", "published") and not paused and batch:
                # How many envelopes the claim script built (dispatch/built.py): they have no message.
                print(f"BUILT {sum(1 for o in batch if not hasattr(o, 'message'))}", flush=True)
            if point == "handing" and not paused and batch:
                paused = True  # past every check before the publish call: only the publisher's own remains
                pause(point, [o.task_id for o in batch])
            report = publish(batch, guard)
            if point == "published" and not paused and report is not None and report.published:
                paused = True
                # Whether the next claim was sent before this batch went out (dispatch/built.py).
                print(f"AHEAD {getattr(handoff, '_ahead', None) is not None}", flush=True)
                pause(point, [o.task_id for o in batch[: report.published]])
            return report
        return publish_then_pause

    handoff._decode = pause_then_decode
    handoff.publisher = type("Paused", (), {"publish": staticmethod(pausing(publish))})()
    lane = getattr(handoff, "lane", None)
    if lane is not None:  # envelopes built by the claim go through publish_built
        paused_lane = type("PausedBuilt", (), {"publish_built": staticmethod(pausing(lane[0].publish_built))})()
        handoff.lane = (paused_lane, lane[1])


def hook_fast_path(point: str) -> None:
    """Pause the fast path around its one script call (the pass's every shard in one round trip).
    ``after_push`` prints the ids the script pushed."""
    from celery_zset_scheduler.dispatch import fastpath
    from celery_zset_scheduler.model.ids import task_id_of

    push = fastpath.fast_push_many
    paused = False

    def pausing(claims: Any, fences: Any, routes: Any, **kwargs: Any) -> Any:
        nonlocal paused
        if point == "before_push" and not paused and claims.store.client.zcard(claims.keys.shard(0).due):
            due = claims.store.client.zrangebyscore(claims.keys.shard(0).due, "-inf", "+inf", start=0, num=5)
            if due:
                paused = True
                pause(point, [task_id_of(d) for d in due])
        results, unacked = push(claims, fences, routes, **kwargs)
        if point == "after_push" and not paused:
            pushed = [r for r in results.values() if not isinstance(r, Exception) and r.pushed_due_ms]
            if pushed:
                paused = True
                pause(point, [str(sum(len(r.pushed_due_ms) for r in pushed))])
        return results, unacked

    fastpath.fast_push_many = pausing  # type: ignore[assignment]


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(message)s")
    dispatcher = build_dispatcher(app)
    if sys.argv[1].endswith("_push"):
        hook_fast_path(sys.argv[1])
    else:
        hook(dispatcher, sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: dispatcher.stop())
    print(f"MEMBER {dispatcher.member_id}", flush=True)
    dispatcher.run()


if __name__ == "__main__":
    main()
