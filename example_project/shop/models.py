"""What the shop's tasks work on: reminders sent at a chosen time, and charges made once."""

from django.db import models


class Reminder(models.Model):
    email = models.EmailField()
    text = models.CharField(max_length=200)
    remind_at = models.DateTimeField(db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.email} at {self.remind_at:%Y-%m-%d %H:%M:%S}"


class Charge(models.Model):
    order_id = models.BigIntegerField(unique=True)  # the idempotency key of the charge task
    cents = models.PositiveIntegerField()
    charged_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"order {self.order_id}: {self.cents / 100:.2f}"
