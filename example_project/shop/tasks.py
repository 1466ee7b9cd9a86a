"""The shop's tasks, each a kind of timed work the store keeps until it is due.

- ``send_reminder``: a reminder e-mailed at the time its user chose (``eta=``).
- ``charge``: a billing charge, run at most once per order (an idempotency key).
- ``call_webhook``: a call to a partner that often fails; retried with backoff in the store,
  then dead-lettered for a person to requeue.
- ``cleanup``: periodic (``CELERY_BEAT_SCHEDULE``), run by the dispatcher that leads shard 0.
"""

import json
import urllib.error
import urllib.request
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from celery_zset_scheduler import IdempotentTask, ZSetTask

from .celery import app
from .models import Charge, Reminder


class PartnerUnavailable(Exception):
    """The partner answered with a server error, or not at all."""


@app.task(name="shop.send_reminder")
def send_reminder(reminder_id: int) -> bool:
    # Marking first makes a second delivery (at-least-once) send nothing.
    marked = Reminder.objects.filter(pk=reminder_id, sent_at__isnull=True).update(sent_at=timezone.now())
    if not marked:
        return False
    reminder = Reminder.objects.get(pk=reminder_id)
    send_mail("Your reminder", reminder.text, None, [reminder.email])
    return True


@app.task(base=IdempotentTask, name="shop.charge", idempotency_key="charge:{order_id}",
          autoretry_for=(TimeoutError,), retry_backoff=True, max_retries=5)
def charge(order_id: int, cents: int) -> int:
    made, _ = Charge.objects.get_or_create(order_id=order_id, defaults={"cents": cents})
    return int(made.pk)


@app.task(base=ZSetTask, name="shop.call_webhook", autoretry_for=(PartnerUnavailable,),
          retry_backoff=2, retry_backoff_max=30, retry_jitter=True, max_retries=3)
def call_webhook(event: str, payload: dict) -> int:
    body = json.dumps({"event": event, **payload}).encode()
    request = urllib.request.Request(settings.SHOP_WEBHOOK_URL, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise PartnerUnavailable(f"partner answered {exc.code}") from None
        raise
    except (urllib.error.URLError, TimeoutError) as exc:
        raise PartnerUnavailable(f"partner unreachable: {exc}") from None


@app.task(name="shop.cleanup")
def cleanup() -> int:
    """Forget reminders sent more than an hour ago."""
    deleted, _ = Reminder.objects.filter(sent_at__lt=timezone.now() - timedelta(hours=1)).delete()
    return deleted
