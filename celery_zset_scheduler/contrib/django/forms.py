"""Forms of the pages: times as people type them (``model.times``), validated before any write."""

from __future__ import annotations

from typing import Any

from django import forms

from ...model.times import Moment, iso, parse_moment

LATEST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: beyond it a due time is a typo
TIME_HELP = "ISO 8601 (a naive time is UTC, as a Celery worker reads it), 'now', or an offset: +10m, -2h, 1d12h."


class MomentField(forms.CharField):
    """A point in time; ``clean`` returns epoch milliseconds (None when empty and optional)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", TIME_HELP)
        kwargs.setdefault("widget", forms.TextInput(attrs={"size": 28, "placeholder": "+1h"}))
        super().__init__(**kwargs)

    def clean(self, value: Any) -> int | None:
        text = super().clean(value)
        if not text:
            return None
        return moment_ms(text)


def moment_ms(text: str) -> int:
    """Epoch ms of a typed time; raises ``ValidationError`` with the accepted forms."""
    try:
        moment: Moment = parse_moment(text)
        when = moment.ms()
    except (ValueError, OverflowError) as exc:
        raise forms.ValidationError(str(exc)) from None
    if not 0 <= when <= LATEST_MS:
        raise forms.ValidationError(f"{text!r} is {'before 1970' if when < 0 else 'after the year 9999'}")
    return when


class RescheduleForm(forms.Form):
    due = MomentField(label="New due time")


class RequeueForm(forms.Form):
    due = MomentField(label="Due", required=False,
                      help_text="Empty: now (by Redis time). " + TIME_HELP)


def typed_time(params: Any, name: str, errors: list[str]) -> int | None:
    """A time filter of a listing's query string; a bad one is reported and ignored."""
    text = (params.get(name) or "").strip()
    if not text:
        return None
    try:
        return moment_ms(text)
    except forms.ValidationError as exc:
        errors.append(f"{name}: {' '.join(exc.messages)}")
        return None


def shown_time(ms: int | None) -> str | None:
    return iso(ms)
