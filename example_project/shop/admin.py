from django.contrib import admin

from .models import Charge, Reminder


@admin.register(Reminder)
class ReminderAdmin(admin.ModelAdmin):
    list_display = ("email", "text", "remind_at", "sent_at")
    list_filter = ("sent_at",)
    show_full_result_count = False


@admin.register(Charge)
class ChargeAdmin(admin.ModelAdmin):
    list_display = ("order_id", "cents", "charged_at")
