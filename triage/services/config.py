"""Tiers and scheduler settings. Each change bumps one configuration version (kept on SchedulerSettings) and
publishes ``{"kind": "config", "version": n}`` after the commit; the inference worker reloads from the DB, and
the board is sent its live calls again.

The admin calls these services (or ``config_changed`` after a form save it performed itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from triage.contracts import ConfigChanged
from triage.models import ESI_LEVELS, ApiClient, AuditAction, SchedulerSettings, Tier
from triage.realtime import mark_calls_dirty
from triage.selectors.queue import live_calls
from triage.streams import control_publish_on_commit

from .audit import Actor, audit_record
from .errors import DomainError

TIER_FIELDS = frozenset(
    {
        "name", "colour", "sort_order", "esi_levels", "ttft_target_mean_s", "ttft_target_p90_s",
        "e2e_target_mean_s", "e2e_target_p90_s", "tpot_target_s", "tdg_weight", "max_preemptions", "reserved_kv_fraction",
        "aging_step_s", "aging_ceiling_level", "alert_repeat_s", "acknowledge_within_s",
    }
)
SCHEDULER_FIELDS = frozenset(
    {
        "policy", "batch_size", "kv_capacity_blocks", "block_size", "preempt_on_arrival", "preempt_within_level",
        "limited_preemption_c", "aging_enabled", "stage_merge", "lower_prefill_share", "eviction", "micro_batch_max",
        "micro_batch_wait_ms",
    }
)


def config_changed(*, actor: Actor, action: AuditAction, data: Mapping[str, Any] | None = None) -> int:
    """Bump the configuration version, audit, and publish the config message on commit; returns the version."""
    with transaction.atomic():
        SchedulerSettings.load()
        SchedulerSettings.objects.filter(pk=1).update(version=F("version") + 1, updated_at=timezone.now())
        version = SchedulerSettings.objects.values_list("version", flat=True).get(pk=1)
        audit_record(action=action, actor=actor, data={**(data or {}), "version": version})
        control_publish_on_commit(ConfigChanged(version=version))
        # Each call's board state carries its aged level, which the tiers and settings decide.
        transaction.on_commit(lambda: mark_calls_dirty(live_calls().values_list("pk", flat=True)))
    return version


def _assign(instance: Tier | SchedulerSettings, fields: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise DomainError("unknown fields", fields={name: ["Unknown field."] for name in unknown})
    for name, value in fields.items():
        setattr(instance, name, value)
    try:
        instance.full_clean()
    except ValidationError as exc:
        raise DomainError("invalid configuration", fields=exc.message_dict) from exc
    _check_esi_levels(instance)


def _check_esi_levels(instance: Tier | SchedulerSettings) -> None:
    levels = getattr(instance, "esi_levels", None)
    if levels is not None and (
        not isinstance(levels, list) or any(isinstance(x, bool) or x not in ESI_LEVELS for x in levels)
    ):
        raise DomainError("invalid ESI levels", fields={"esi_levels": ["a list of ESI levels 1-5"]})


def scheduler_settings_update(*, actor: Actor, **fields: Any) -> SchedulerSettings:
    with transaction.atomic():
        settings = SchedulerSettings.objects.select_for_update().get(pk=SchedulerSettings.load().pk)
        _assign(settings, fields, SCHEDULER_FIELDS)
        settings.save(update_fields=[*fields, "updated_at"])
        settings.version = config_changed(actor=actor, action=AuditAction.SCHEDULER_SETTINGS_UPDATED, data=_jsonable(fields))
    return settings


def tier_create(*, actor: Actor, **fields: Any) -> Tier:
    tier = Tier()
    with transaction.atomic():
        _assign(tier, fields, TIER_FIELDS)
        tier.save()
        config_changed(actor=actor, action=AuditAction.TIER_CREATED, data={"tier": tier.name})
    return tier


def tier_update(*, tier: Tier, actor: Actor, **fields: Any) -> Tier:
    with transaction.atomic():
        _assign(tier, fields, TIER_FIELDS)
        tier.save(update_fields=list(fields))
        config_changed(actor=actor, action=AuditAction.TIER_UPDATED, data={"tier": tier.name, **_jsonable(fields)})
    return tier


def tier_delete(*, tier: Tier, actor: Actor) -> None:
    with transaction.atomic():
        name = tier.name
        tier.delete()
        config_changed(actor=actor, action=AuditAction.TIER_DELETED, data={"tier": name})


def api_client_set_share_weight(*, client: ApiClient, weight: int, actor: Actor) -> ApiClient:
    """The call system's fair share of the LLM work within a level (scheduler.policies.fair_share); the
    inference worker reloads its configuration after the commit."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise DomainError("invalid share weight", fields={"share_weight": ["a whole number from 1 to 100"]})
    with transaction.atomic():
        client.share_weight = weight
        client.save(update_fields=["share_weight"])
        config_changed(actor=actor, action=AuditAction.API_CLIENT_SHARE_SET,
                       data={"client": client.name, "share_weight": weight})
    return client


def _jsonable(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, str | int | float | bool | list | type(None)) else str(v) for k, v in fields.items()}
