from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from .views import partner_webhook

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/")),
    path("admin/", admin.site.urls),
    path("hooks/partner/", partner_webhook),
]
