"""Supervisors' configuration: the tiers, the dispatch-priority table, the scheduler settings, and the
protocol library (read-only)."""

from __future__ import annotations

from collections.abc import Mapping

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from judgment.protocols import load_library
from scheduler.settings_on_vllm import SCHEDULER_SETTINGS, TIER_SETTINGS, OnVllm, not_applying_note
from triage.models import (
    ESI_LEVELS,
    DispatchPriorityRule,
    SchedulerSettings,
    Tier,
)
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

from .base import RoleAdmin, _report


def protocol_library_view(request: HttpRequest) -> HttpResponse:
    """The dispatch protocols and their versions, read-only (the library is data, edited in fixtures/guidance/)."""
    library = load_library()
    protocols = [library.protocols[i] for i in sorted(library.protocols, key=lambda i: library.protocols[i].title)]
    context = {**admin.site.each_context(request), "title": "Dispatch protocols", "library": library,
               "protocols": protocols}
    return TemplateResponse(request, "admin/triage/protocols.html", context)


def _marked_for_vllm(form: type, on_vllm: Mapping[str, OnVllm]) -> type:
    """The form with each field vLLM does not apply saying so under it (scheduler/settings_on_vllm.py)."""
    for name, field in form.base_fields.items():
        entry = on_vllm.get(name)
        if entry is not None and not entry.applies and not_applying_note(entry) not in str(field.help_text):
            field.help_text = f"{field.help_text} {not_applying_note(entry)}".strip()
    return form


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
        ("Alerts on the board (seconds)", {"fields": ("alert_repeat_s", "acknowledge_within_s")}),
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
