"""A partner's webhook endpoint that is down more often than not, for the webhook task to call."""

import random

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt
@require_POST
def partner_webhook(request: HttpRequest) -> HttpResponse:
    if random.random() < settings.SHOP_PARTNER_FAILURE_RATE:
        return HttpResponse("try again later", status=503)
    return HttpResponse(status=204)
