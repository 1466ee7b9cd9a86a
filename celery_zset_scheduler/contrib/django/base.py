"""What every admin page of the store shares: URLs, permissions, the template context, the
store's connection, errors shown as a page, and the confirmation of actions."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import redis
from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme

from ...celery.cli.output import one_line
from ...celery.core.state import Installation
from ...errors import ZSetSchedulerError
from ...model.times import iso
from ...store.deadletters import DeadLetters
from ...store.pending import Store
from .conf import AdminOptions, installation

View = Callable[..., HttpResponse]
SELECTED = "_selected_action"  # Django's name for the checked rows
MAX_IDS = 1000  # ids one POST may name: a page's worth; bigger selections go by filters


@dataclass(frozen=True)
class Column:
    title: str
    css: str = ""


@dataclass(frozen=True)
class Choice:
    display: str
    url: str
    selected: bool


@dataclass(frozen=True)
class FilterSpec:
    title: str
    choices: list[Choice]


def cells(columns: Sequence[Column], values: Sequence[Any]) -> list[dict[str, Any]]:
    """A row's cells with their column's CSS class; a ``(value, title)`` pair adds a tooltip."""
    return [{"value": v[0], "title": v[1], "css": c.css} if isinstance(v, tuple) else {"value": v, "css": c.css}
            for c, v in zip(columns, values, strict=True)]


def short_time(ms: int) -> tuple[str, str | None]:
    """A listing's time to the second, with the exact ISO time as its tooltip."""
    exact = iso(ms) or ""
    return exact[:19].replace("T", " "), exact


def query(params: Mapping[str, Any], **changes: Any) -> str:
    """``?a=1&b=2`` of ``params`` with ``changes`` applied; empty values are left out."""
    merged = {**params, **changes}
    return "?" + urlencode([(k, v) for k, v in merged.items() if v not in (None, "")])


class StoreAdmin(admin.ModelAdmin):
    """A ModelAdmin whose pages read Redis instead of the database."""

    actions = None
    list_template = "zset_scheduler/admin/change_list.html"

    # -- URLs and permissions -----------------------------------------------------------------

    def routes(self) -> list[tuple[str, View, str]]:
        """``(route, view, name suffix)``; ``changelist`` and ``change`` are what Django links to."""
        return [("", self.list_page, "changelist")]

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [path(route, self.admin_site.admin_view(self._guarded(view)), name=f"{prefix}_{suffix}")
                for route, view, suffix in self.routes()]

    def url(self, suffix: str, *args: Any) -> str:
        return str(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{suffix}", args=args,
                           current_app=self.admin_site.name))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def require_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def require_change(self, request: HttpRequest) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied

    def list_page(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    # -- the store ----------------------------------------------------------------------------

    @property
    def options(self) -> AdminOptions:
        return AdminOptions.from_settings()

    def installation(self) -> Installation:
        return installation()

    def store(self) -> Store:
        """The store, after checking (reading only) that the shard count matches the settings."""
        store = self.installation().store
        store.verify_meta()
        return store

    def dead_letters(self) -> DeadLetters:
        return self.installation().dead_letters

    def _guarded(self, view: View) -> View:
        """Redis down or a bad configuration: a page that says so (503), not a server error."""

        @functools.wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except (redis.RedisError, ZSetSchedulerError, ImproperlyConfigured) as exc:
                response = self.render(request, "zset_scheduler/admin/unavailable.html",
                                       "Store unavailable", error=one_line(exc, self._url()))
                response.status_code = 503
                return response

        return guarded

    def _url(self) -> str | None:
        try:
            return self.installation().settings.url
        except (ZSetSchedulerError, ImproperlyConfigured):
            return None

    # -- rendering ----------------------------------------------------------------------------

    def render(self, request: HttpRequest, template: str, title: str, **context: Any) -> TemplateResponse:
        opts = self.opts
        data = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "app_label": opts.app_label,
            "title": title,
            "subtitle": None,
            "has_view_permission": self.has_view_permission(request),
            "has_change_permission": self.has_change_permission(request),
            "changelist_url": self.url("changelist"),
            "media": self.media,
            **context,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, template, data)

    def back_to(self, request: HttpRequest, fallback: str) -> str:
        """The ``next`` URL a form carried, when it is one of this site's; else ``fallback``."""
        target = request.POST.get("next") or request.GET.get("next") or ""
        if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                                      require_https=request.is_secure()):
            return target
        return fallback

    def back(self, request: HttpRequest, text: str | None = None, level: int = messages.INFO) -> HttpResponseRedirect:
        """Back to where the form came from (else the list), with ``text`` as a message if given."""
        if text is not None:
            self.message_user(request, text, level)
        return HttpResponseRedirect(self.back_to(request, self.url("changelist")))

    def posted_action(self, request: HttpRequest, actions: Collection[str]) -> str | HttpResponse:
        """The action a POST names, or the response that refuses it (not a POST, none chosen);
        raises PermissionDenied without the change permission."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        self.require_change(request)
        action = request.POST.get("action") or ""
        if action not in actions:
            return self.back(request, "No action selected.", messages.WARNING)
        return action

    def selected_ids(self, request: HttpRequest) -> list[str]:
        ids = list(dict.fromkeys(i for i in request.POST.getlist(SELECTED) if i))
        if len(ids) > MAX_IDS:
            raise PermissionDenied(f"at most {MAX_IDS} ids at once: select by filters instead")
        return ids

    def nothing_selected(self, request: HttpRequest) -> HttpResponseRedirect:
        return self.back(request, "Items must be selected in order to perform actions on them. "
                                  "No items have been changed.", messages.WARNING)

    def confirm(self, request: HttpRequest, *, title: str, question: str, action: str, ids: Sequence[str],
                hidden: Mapping[str, str], form: Any = None, warning: str | None = None,
                links: Mapping[str, str] | None = None) -> TemplateResponse:
        """The "Are you sure?" page of an action, as Django's delete confirmation."""
        return self.render(
            request, "zset_scheduler/admin/confirm.html", title, question=question, action=action,
            ids=list(ids), links=dict(links or {}), hidden=dict(hidden), form=form, warning=warning,
            action_url=self.url("action"), next_url=self.back_to(request, self.url("changelist")),
            selected_name=SELECTED,
        )
