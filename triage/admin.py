"""The admin: tiers and scheduler settings for supervisors, API clients for admins, the audit log read-only.

Every write goes through a service, so it is audited with its actor and — for tiers and settings —
publishes ``{"kind": "config", "version": n}`` on commit; the running inference worker reloads within
a second. Access follows the roles in ``triage.roles`` (the user must also be staff to enter the admin).
"""

from __future__ import annotations

from collections.abc import Mapping

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from judgment.protocols import load_library
from scheduler.settings_on_vllm import SCHEDULER_SETTINGS, TIER_SETTINGS, OnVllm, not_applying_note
from triage.models import (
    ESI_LEVELS,
    ApiClient,
    AuditEvent,
    DispatchPriorityRule,
    SchedulerSettings,
    Tier,
    WebhookDelivery,
)
from triage.roles import is_admin, is_supervisor
from triage.services.clients import api_client_create, api_client_deactivate, api_client_rotate
from triage.services.config import (
    SCHEDULER_FIELDS,
    TIER_FIELDS,
    scheduler_settings_update,
    tier_create,
    tier_delete,
    tier_update,
)
from triage.services.dispatch_priorities import dispatch_rule_delete, dispatch_rule_save
from triage.services.errors import DomainError
from triage.services.webhooks import api_client_rotate_webhook_secret, api_client_set_webhook

admin.site.site_header = "Triage administration"
admin.site.site_title = "Triage admin"


def protocol_library_view(request: HttpRequest) -> HttpResponse:
    """The dispatch protocols and their versions, read-only (the library is data, edited in fixtures/guidance/)."""
    library = load_library()
    protocols = [library.protocols[i] for i in sorted(library.protocols, key=lambda i: library.protocols[i].title)]
    context = {**admin.site.each_context(request), "title": "Dispatch protocols", "library": library,
               "protocols": protocols}
    return TemplateResponse(request, "admin/triage/protocols.html", context)


def _may_configure(request: HttpRequest) -> bool:
    return is_supervisor(request.user) or is_admin(request.user)


def _marked_for_vllm(form: type, on_vllm: Mapping[str, OnVllm]) -> type:
    """The form with each field vLLM does not apply saying so under it (scheduler/settings_on_vllm.py)."""
    for name, field in form.base_fields.items():
        entry = on_vllm.get(name)
        if entry is not None and not entry.applies and not_applying_note(entry) not in str(field.help_text):
            field.help_text = f"{field.help_text} {not_applying_note(entry)}".strip()
    return form


class RoleAdmin(admin.ModelAdmin):
    """Model permissions *or* the role decide: groups need no per-model permission rows."""

    def _role_ok(self, request: HttpRequest) -> bool:
        return _may_configure(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or (request.user.is_staff and self._role_ok(request))

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_view_permission(request, obj) or self._role_ok(request)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_change_permission(request, obj) or self._role_ok(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) or self._role_ok(request)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return super().has_delete_permission(request, obj) or self._role_ok(request)


def _report(request: HttpRequest, exc: DomainError) -> None:
    details = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.fields.items())
    messages.error(request, f"{exc.message}{' — ' + details if details else ''}")


# --- tiers -----------------------------------------------------------------------------------------


class TierForm(forms.ModelForm):
    class Meta:
        model = Tier
        fields = "__all__"
        widgets = {"colour": forms.TextInput(attrs={"type": "color"})}

    def clean_esi_levels(self) -> list[int]:
        levels = self.cleaned_data["esi_levels"]
        if not isinstance(levels, list) or any(isinstance(x, bool) or x not in ESI_LEVELS for x in levels):
            raise forms.ValidationError("A list of ESI levels from 1 to 5, e.g. [1] or [3, 4].")
        return sorted(set(levels))

    def clean(self) -> dict:
        data = super().clean()
        for mean, p90 in (("ttft_target_mean_s", "ttft_target_p90_s"), ("e2e_target_mean_s", "e2e_target_p90_s")):
            if data.get(mean) is not None and data.get(p90) is not None and data[p90] < data[mean]:
                self.add_error(p90, "The p90 target cannot be below the mean target.")
        return data


@admin.register(Tier)
class TierAdmin(RoleAdmin):
    form = TierForm
    list_display = (
        "name", "swatch", "sort_order", "levels", "ttft_target_mean_s", "ttft_target_p90_s",
        "e2e_target_mean_s", "e2e_target_p90_s", "tpot_target_s", "tdg_weight", "max_preemptions",
        "reserved_kv_fraction",
    )
    list_editable = (
        "sort_order", "ttft_target_mean_s", "ttft_target_p90_s", "e2e_target_mean_s", "e2e_target_p90_s",
        "tdg_weight", "max_preemptions",
    )
    list_display_links = ("name",)
    fieldsets = (
        (None, {"fields": ("name", "colour", "sort_order", "esi_levels")}),
        ("Service-level targets (seconds)", {
            "fields": (("ttft_target_mean_s", "ttft_target_p90_s"), ("e2e_target_mean_s", "e2e_target_p90_s"),
                       "tpot_target_s"),
        }),
        ("Scheduling", {
            "fields": ("tdg_weight", "max_preemptions", "reserved_kv_fraction", "aging_step_s", "aging_ceiling_level"),
        }),
    )

    def get_form(self, request: HttpRequest, obj: Tier | None = None, **kwargs: object) -> type:
        return _marked_for_vllm(super().get_form(request, obj, **kwargs), TIER_SETTINGS)

    @admin.display(description="Colour")
    def swatch(self, obj: Tier) -> str:
        return format_html(
            '<span style="display:inline-block;width:1.2em;height:1.2em;border:1px solid #333;'
            'vertical-align:middle;background:{}" aria-hidden="true"></span> <code>{}</code>',
            obj.colour, obj.colour,
        )

    @admin.display(description="ESI levels")
    def levels(self, obj: Tier) -> str:
        return ", ".join(str(x) for x in obj.esi_levels) or "–"

    def save_model(self, request: HttpRequest, obj: Tier, form: forms.ModelForm, change: bool) -> None:
        fields = {name: getattr(obj, name) for name in (form.changed_data if change else TIER_FIELDS)
                  if name in TIER_FIELDS}
        try:
            if change:
                tier_update(tier=obj, actor=request.user, **fields)
            else:
                created = tier_create(actor=request.user, **fields)
                obj.pk = created.pk
        except DomainError as exc:
            _report(request, exc)

    def delete_model(self, request: HttpRequest, obj: Tier) -> None:
        tier_delete(tier=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: object) -> None:
        for tier in list(queryset):
            tier_delete(tier=tier, actor=request.user)


@admin.register(DispatchPriorityRule)
class DispatchPriorityRuleAdmin(RoleAdmin):
    """The centre's priority code, response mode and units by ESI level (triage/dispatch_priority.py)."""

    list_display = ("esi_level", "decision_point", "protocol", "priority_code", "response_mode", "units")
    list_filter = ("esi_level", "response_mode")
    fields = (("esi_level", "decision_point", "protocol"), ("priority_code", "response_mode"), "resources", "note")

    @admin.display(description="Units")
    def units(self, obj: DispatchPriorityRule) -> str:
        return ", ".join(f"{r['count']} {r['unit']}{' (lights and sirens)' if r['lights_and_sirens'] else ''}"
                         for r in obj.resources) or "none"

    def save_model(self, request: HttpRequest, obj: DispatchPriorityRule, form: forms.ModelForm, change: bool) -> None:
        dispatch_rule_save(rule=obj, actor=request.user)

    def delete_model(self, request: HttpRequest, obj: DispatchPriorityRule) -> None:
        dispatch_rule_delete(rule=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: object) -> None:
        for rule in list(queryset):
            dispatch_rule_delete(rule=rule, actor=request.user)


# --- scheduler settings (a singleton) ----------------------------------------------------------------


@admin.register(SchedulerSettings)
class SchedulerSettingsAdmin(RoleAdmin):
    readonly_fields = ("version", "updated_at")
    fieldsets = (
        ("Policy", {"fields": (
            "policy", "preempt_on_arrival", "preempt_within_level", "limited_preemption_c", "aging_enabled",
        )}),
        ("Stages", {"fields": ("stage_merge", "lower_prefill_share")}),
        ("Capacity", {"fields": ("batch_size", "kv_capacity_blocks", "block_size", "eviction")}),
        ("Triage micro-batching", {"fields": ("micro_batch_max", "micro_batch_wait_ms")}),
        ("Guidance guard", {"fields": ("guard_similarity_threshold",)}),
        ("Applied", {"fields": ("version", "updated_at")}),
    )

    def get_form(self, request: HttpRequest, obj: SchedulerSettings | None = None, **kwargs: object) -> type:
        return _marked_for_vllm(super().get_form(request, obj, **kwargs), SCHEDULER_SETTINGS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # there is exactly one row, created on first use

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponseRedirect:
        obj = SchedulerSettings.load()
        return HttpResponseRedirect(reverse("admin:triage_schedulersettings_change", args=[obj.pk]))

    def save_model(self, request: HttpRequest, obj: SchedulerSettings, form: forms.ModelForm, change: bool) -> None:
        fields = {name: getattr(obj, name) for name in form.changed_data if name in SCHEDULER_FIELDS}
        try:
            saved = scheduler_settings_update(actor=request.user, **fields)
        except DomainError as exc:
            _report(request, exc)
            return
        messages.info(request, f"Configuration version {saved.version} published to the inference worker.")


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
    actions = ("rotate_tokens", "rotate_webhook_secrets", "deactivate_clients")
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
        return ("name", "token_prefix", "scopes", "throttle_rate", "is_active", "created_at", "rotated_at",
                "webhook_url", "webhook_secret")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiClient | None = None) -> tuple:
        # Edits go through services that audit them: the actions (rotate, deactivate) and the webhook URL,
        # the one field this form changes (save_model).
        return tuple(f for f in self.get_fields(request, obj) if f != "webhook_url") if obj is not None else ()

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

    @admin.action(description="Rotate the token of the selected clients (new tokens shown once)", permissions=["change"])
    def rotate_tokens(self, request: HttpRequest, queryset: object) -> None:
        for client in queryset:
            issued = api_client_rotate(client=client, actor=request.user)
            _show_token_once(request, client.name, issued.token)

    @admin.action(description="Draw a new webhook signing secret for the selected clients", permissions=["change"])
    def rotate_webhook_secrets(self, request: HttpRequest, queryset: object) -> None:
        for client in queryset:
            api_client_rotate_webhook_secret(client=client, actor=request.user)
        messages.success(request, "New webhook secrets drawn (see each client's page); the old ones no longer sign.")

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


# --- webhook deliveries (read-only) ------------------------------------------------------------------


class ReadOnlyRoleAdmin(RoleAdmin):
    """A record written by the system alone: nobody adds, edits or deletes it here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyRoleAdmin):
    """Every attempt to POST an event to a call system, as the worker recorded it."""

    list_display = ("started_at", "client", "event", "call", "attempt", "outcome", "status_code", "error")
    list_filter = ("outcome", "event", "client")
    search_fields = ("event_id", "call__external_id", "url")
    date_hierarchy = "started_at"
    list_select_related = ("client", "call")
    readonly_fields = ("client", "call", "event_id", "event", "url", "attempt", "outcome", "status_code", "error",
                       "started_at", "finished_at", "duration_ms")


# --- the audit log (read-only) -----------------------------------------------------------------------


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyRoleAdmin):
    list_display = ("created_at", "action", "actor", "call", "from_status", "to_status")
    list_filter = ("action", "to_status", ("created_at", admin.DateFieldListFilter))
    search_fields = ("actor", "action", "call__external_id")
    date_hierarchy = "created_at"
    list_select_related = ("call",)
    readonly_fields = ("created_at", "action", "actor", "actor_user", "call", "from_status", "to_status", "data")
