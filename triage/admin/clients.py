"""Admins' API clients (tokens, webhooks) and the webhook deliveries they were sent (read-only)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest
from django.utils.html import format_html

from triage.models import (
    ApiClient,
    WebhookDelivery,
)
from triage.roles import is_admin
from triage.services.clients import api_client_create, api_client_deactivate, api_client_rotate
from triage.services.config import api_client_set_share_weight
from triage.services.errors import DomainError
from triage.services.webhooks import (
    api_client_rotate_webhook_secret,
    api_client_set_webhook,
    webhook_ping,
    webhook_resend,
)

from .base import ReadOnlyRoleAdmin, _report

# --- API clients (admins only) -----------------------------------------------------------------------


class ApiClientCreateForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in ApiClient.ALL_SCOPES],
        initial=list(ApiClient.ALL_SCOPES),
        widget=forms.CheckboxSelectMultiple,
    )
    webhook_url = forms.URLField(max_length=500, required=False, assume_scheme="https",
                                 help_text=ApiClient._meta.get_field("webhook_url").help_text)

    class Meta:
        model = ApiClient
        fields = ("name", "scopes", "throttle_rate", "webhook_url")


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    list_display = ("name", "token_prefix", "scope_list", "throttle_rate", "is_active", "created_at", "rotated_at")
    list_filter = ("is_active",)
    search_fields = ("name", "token_prefix")
    actions = ("rotate_tokens", "rotate_webhook_secrets", "ping_webhooks", "deactivate_clients")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def _role_ok(self, request: HttpRequest) -> bool:
        return is_admin(request.user)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or (request.user.is_staff and self._role_ok(request))

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or self._role_ok(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) or self._role_ok(request)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_change_permission(request, obj) or self._role_ok(request)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # calls reference their client: deactivate instead

    def get_form(self, request: HttpRequest, obj: ApiClient | None = None, **kwargs: object) -> type:
        if obj is None:
            kwargs["form"] = ApiClientCreateForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request: HttpRequest, obj: ApiClient | None = None) -> tuple:
        if obj is None:
            return ("name", "scopes", "throttle_rate", "webhook_url")
        return ("name", "token_prefix", "scopes", "throttle_rate", "share_weight", "is_active", "created_at",
                "rotated_at", "webhook_url", "webhook_secret")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiClient | None = None) -> tuple:
        # Edits go through services that audit them: the actions (rotate, deactivate), the webhook URL and the
        # share weight, the fields this form changes (save_model).
        editable = ("webhook_url", "share_weight")
        return tuple(f for f in self.get_fields(request, obj) if f not in editable) if obj is not None else ()

    @admin.display(description="Scopes")
    def scope_list(self, obj: ApiClient) -> str:
        return ", ".join(obj.scopes)

    def save_model(self, request: HttpRequest, obj: ApiClient, form: forms.ModelForm, change: bool) -> None:
        if change:
            if "webhook_url" in form.changed_data:
                try:
                    api_client_set_webhook(client=ApiClient.objects.get(pk=obj.pk),
                                           url=form.cleaned_data.get("webhook_url") or "", actor=request.user)
                except DomainError as exc:
                    _report(request, exc)
            if "share_weight" in form.changed_data:
                try:
                    api_client_set_share_weight(client=ApiClient.objects.get(pk=obj.pk),
                                                weight=form.cleaned_data["share_weight"], actor=request.user)
                except DomainError as exc:
                    _report(request, exc)
            return
        try:
            issued = api_client_create(
                name=form.cleaned_data["name"], scopes=form.cleaned_data["scopes"],
                throttle_rate=form.cleaned_data.get("throttle_rate") or "", actor=request.user,
                webhook_url=form.cleaned_data.get("webhook_url") or "",
            )
        except DomainError as exc:
            _report(request, exc)
            return
        obj.pk = issued.client.pk
        _show_token_once(request, issued.client.name, issued.token)

    @admin.action(description="Rotate the token of the selected clients (new tokens shown once; the old ones work 24 h more)",
                  permissions=["change"])
    def rotate_tokens(self, request: HttpRequest, queryset: object) -> None:
        for client in queryset:
            issued = api_client_rotate(client=client, actor=request.user)
            _show_token_once(request, client.name, issued.token)

    @admin.action(description="Draw a new webhook signing secret for the selected clients", permissions=["change"])
    def rotate_webhook_secrets(self, request: HttpRequest, queryset: object) -> None:
        for client in queryset:
            api_client_rotate_webhook_secret(client=client, actor=request.user)
        messages.success(request, "New webhook secrets drawn (see each client's page); the old ones no longer sign.")

    @admin.action(description="Send the selected clients' webhooks a test event (webhook.ping)", permissions=["change"])
    def ping_webhooks(self, request: HttpRequest, queryset: object) -> None:
        for client in queryset:
            try:
                event_id = webhook_ping(client=client, actor=request.user)
            except DomainError as exc:
                _report(request, exc)
                continue
            messages.success(request, f"{client.name}: webhook.ping {event_id} sent (see Webhook deliveries)")

    @admin.action(description="Deactivate the selected clients", permissions=["change"])
    def deactivate_clients(self, request: HttpRequest, queryset: object) -> None:
        for client in queryset.filter(is_active=True):
            api_client_deactivate(client=client, actor=request.user)
        messages.success(request, "Deactivated.")


def _show_token_once(request: HttpRequest, name: str, token: str) -> None:
    # A message is displayed on the next page and then discarded; only the token's hash is stored.
    messages.warning(request, format_html(
        "Token for <strong>{}</strong>: <code>{}</code> — copy it now, it will not be shown again.", name, token
    ))


# --- webhook deliveries (read-only) ----------------------------------------------------------------------


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyRoleAdmin):
    """Every attempt to POST an event to a call system, as the worker recorded it."""

    list_display = ("started_at", "client", "event", "call", "attempt", "outcome", "status_code", "error")
    list_filter = ("outcome", "event", "client")
    search_fields = ("event_id", "call__external_id", "url")
    date_hierarchy = "started_at"
    list_select_related = ("client", "call")
    readonly_fields = ("client", "call", "event_id", "event", "url", "attempt", "outcome", "status_code", "error",
                       "started_at", "finished_at", "duration_ms", "payload")
    actions = ("resend_events",)

    @admin.action(description="Send the selected events again (as first sent, same id)")
    def resend_events(self, request: HttpRequest, queryset: object) -> None:
        for client, event_id in sorted({(d.client, str(d.event_id)) for d in queryset.select_related("client")},
                                       key=lambda pair: pair[1]):
            try:
                webhook_resend(client=client, event_id=event_id, actor=request.user)
            except DomainError as exc:
                _report(request, exc)
                continue
            messages.success(request, f"{client.name}: event {event_id} sent again")
