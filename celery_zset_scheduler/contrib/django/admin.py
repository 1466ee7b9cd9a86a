"""The admin pages, registered on Django's default admin site."""

from __future__ import annotations

from django.contrib import admin

from .models import DeadLetter, Overview, PeriodicEntry, ScheduledTask
from .pages.deadletters import DeadLetterAdmin
from .pages.overview import OverviewAdmin
from .pages.periodic import PeriodicEntryAdmin
from .pages.scheduled import ScheduledTaskAdmin

admin.site.register(Overview, OverviewAdmin)
admin.site.register(ScheduledTask, ScheduledTaskAdmin)
admin.site.register(PeriodicEntry, PeriodicEntryAdmin)
admin.site.register(DeadLetter, DeadLetterAdmin)
