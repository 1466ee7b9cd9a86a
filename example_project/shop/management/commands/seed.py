"""``manage.py seed``: schedule N tasks (default 100,000) due over the next while, with a progress bar.

Most are reminders (a row each, sent at its time), some charges (one per order, idempotent) and
webhook calls (a partner that often fails: retries, then dead letters). They wait in Redis.
"""

import random
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from celery_zset_scheduler import schedule_many
from celery_zset_scheduler.model.times import parse_moment

from ...models import Reminder
from ...tasks import call_webhook, charge, send_reminder

CHUNK = 5_000
MIX = {"reminders": 0.90, "charges": 0.08, "webhooks": 0.02}


class Command(BaseCommand):
    help = "Schedule N tasks (reminders, charges, webhook calls) due over the next while."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("-n", "--count", type=int, default=100_000, help="how many tasks (default 100,000)")
        parser.add_argument("--over", default="2h", help="spread the due times over this long (default 2h)")
        parser.add_argument("--start", default="10s", help="the first is due this long from now (default 10s)")
        parser.add_argument("--seed", type=int, default=None, help="random seed, for the same run twice")

    def handle(self, *args: Any, **options: Any) -> None:
        count = options["count"]
        if count < 1:
            raise CommandError("--count: give at least 1")
        try:
            start, over = parse_moment("+" + options["start"]).offset, parse_moment("+" + options["over"]).offset
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        rng = random.Random(options["seed"])
        now = datetime.now(timezone.utc)
        bar = Progress(count, self.stdout)
        kinds = rng.choices(list(MIX), weights=list(MIX.values()), k=count)
        dues = sorted(now + timedelta(seconds=start + rng.uniform(0, over)) for _ in range(count))
        t0 = time.perf_counter()
        order = int(time.time() * 1000)
        for begin in range(0, count, CHUNK):
            part = list(zip(kinds[begin:begin + CHUNK], dues[begin:begin + CHUNK], strict=True))
            reminders = [Reminder(email=f"customer{rng.randrange(10**6)}@example.com",
                                  text="Your table is booked for tonight", remind_at=due)
                         for kind, due in part if kind == "reminders"]
            with transaction.atomic():
                made = Reminder.objects.bulk_create(reminders)
            schedule_many(send_reminder, [((r.pk,), {}, r.remind_at) for r in made])
            charges = [((order + begin + n, rng.randrange(500, 50_000)), {}, due)
                       for n, (kind, due) in enumerate(part) if kind == "charges"]
            if charges:
                schedule_many(charge, charges)
            hooks = [(("order.shipped", {"order": order + begin + n}), {}, due)
                     for n, (kind, due) in enumerate(part) if kind == "webhooks"]
            if hooks:
                schedule_many(call_webhook, hooks)
            bar.update(len(part))
        bar.close()
        took = time.perf_counter() - t0
        tally = {k: kinds.count(k) for k in MIX}
        self.stdout.write(
            f"Scheduled {count:,} tasks in {took:.1f} s ({count / took:,.0f}/s), due from {dues[0]:%H:%M:%S} to "
            f"{dues[-1]:%H:%M:%S} UTC: {tally['reminders']:,} reminders, {tally['charges']:,} charges, "
            f"{tally['webhooks']:,} webhook calls."
        )


class Progress:
    """A one-line progress bar on a terminal; a line every 10 % otherwise."""

    def __init__(self, total: int, out: Any, width: int = 30) -> None:
        self.total, self.out, self.width, self.done = total, out, width, 0
        self.tty = sys.stdout.isatty()
        self.started = time.perf_counter()
        self.shown = -1

    def update(self, n: int) -> None:
        self.done += n
        fraction = self.done / self.total
        rate = self.done / max(time.perf_counter() - self.started, 1e-6)
        filled = int(fraction * self.width)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done:>9,}/{self.total:,} tasks "
                f"{rate:>8,.0f}/s")
        if self.tty:
            self.out.write("\r" + line, ending="")
            self.out.flush()
        elif int(fraction * 10) > self.shown:
            self.shown = int(fraction * 10)
            self.out.write(line)

    def close(self) -> None:
        if self.tty:
            self.out.write("")
