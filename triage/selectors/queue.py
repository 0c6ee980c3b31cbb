"""Reads for the dispatcher board: the live queue as the browser sees it, and the metrics panel.

The shapes built here are the dashboard protocol's payloads (see ``triage.realtime``): one ``call``
dict per call and one ``metrics`` dict. A call is *live* (on the board) while it is being worked on,
and stays until a dispatcher closes it once guidance is done or generation failed; cancelled and
closed calls leave the board and remain searchable.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Sequence

from django.db.models import Q, QuerySet
from django.utils import timezone

from judgment.protocols import UNCLEAR, ProtocolLibrary, load_library
from scheduler.config import ESI_LEVELS, SchedulerConfig
from scheduler.metrics import meets_slo, percentile, slo_attainment, slo_targets
from scheduler.policies.aging import effective_level, level_changes
from triage.dispatch_priority import DispatchPriorityTable
from triage.models import (
    ACTIVE_STATUSES,
    TO_CLOSE_STATUSES,
    AuditEvent,
    Call,
    CallStatus,
    Tier,
    TriageAssessment,
)
from triage.redis_clients import ENGINE_METRICS_KEY, ENGINE_METRICS_STALE_S, redis_text_client
from triage.selectors.dispatch_priorities import call_dispatch_priority, dispatch_priority_table
from triage.selectors.scheduler import scheduler_config_load

METRICS_WINDOW_S = 600  # the sliding window for waiting-time percentiles and SLO attainment
PREEMPTION_WINDOW_S = 60
SUMMARY_CHARS = 160

LIVE_FILTER = Q(status__in=ACTIVE_STATUSES) | Q(status__in=TO_CLOSE_STATUSES, closed_at__isnull=True)


def live_calls() -> QuerySet[Call]:
    return Call.objects.filter(LIVE_FILTER).select_related("tier", "assessment", "acknowledged_by", "assigned_to")


def is_live(call: Call) -> bool:
    if call.status in ACTIVE_STATUSES:
        return True
    return call.status in TO_CLOSE_STATUSES and call.closed_at is None


def board_vocabulary() -> dict:
    """The domain's words the board's script needs (rendered into the page, so the script types none of them)."""
    return {"statuses": {status.name: status.value for status in CallStatus}, "active_statuses": list(ACTIVE_STATUSES),
            "status_labels": dict(CallStatus.choices)}


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def protocol_state(assessment: TriageAssessment | None, library: ProtocolLibrary | None = None) -> dict | None:
    """The protocol selection as dispatchers read it: titles from the library, confidence, runner-up."""
    if assessment is None or not assessment.protocol:
        return None
    library = library or load_library()

    def title(protocol_id: str) -> str:
        chosen = library.protocols.get(protocol_id)
        return chosen.title if chosen else protocol_id.replace("_", " ").capitalize()

    family = library.families.get(assessment.protocol_family)
    unclear = assessment.protocol == UNCLEAR
    # A dispatcher's switch replaces the selector's choice: its confidence and runner-up were about another one.
    switched = assessment.protocol_switched_by_id is not None
    return {
        "id": assessment.protocol,
        "version": assessment.protocol_version,
        "unclear": unclear,
        "title": title(assessment.protocol_likeliest if unclear else assessment.protocol),
        "confidence": None if switched else assessment.protocol_confidence,
        "runner_up": "" if switched else assessment.protocol_runner_up,
        "runner_up_title": title(assessment.protocol_runner_up) if assessment.protocol_runner_up and not switched else "",
        "family_title": family.title if family else "",
        "switched_by": assessment.protocol_switched_by.get_username() if switched else None,
    }


def protocol_choices(library: ProtocolLibrary | None = None) -> list[tuple[str, str]]:
    """Every protocol a dispatcher may switch to, as (id, "Title (family)"), by family then title."""
    library = library or load_library()
    rows = sorted(library.protocols.values(), key=lambda p: (library.families[p.family].title, p.title))
    return [(p.id, f"{p.title} ({library.families[p.family].title})") for p in rows]


def call_aging(call: Call, config: SchedulerConfig, now: dt.datetime) -> dict:
    """The level the queue orders a call by (``effective_level``) and each later time it improves
    (``level_changes``): the scheduler's own bounded aging, under the live configuration and the tier the
    scheduler picks, so that the board orders calls as the scheduler does. Only waiting or running calls age."""
    if call.level is None or call.status not in ACTIVE_STATUSES:
        return {"effective_level": call.level, "level_changes": []}
    tier = config.tier_for(call.tier.name if call.tier_id else None, call.level)
    waited_s = (now - call.created_at).total_seconds()
    changes = level_changes(call.level, waited_s, tier, config.aging_enabled)
    return {
        "effective_level": effective_level(call.level, waited_s, tier, config.aging_enabled),
        "level_changes": [
            {"at": _iso(call.created_at + dt.timedelta(seconds=at_s)), "level": level} for at_s, level in changes
        ],
    }


def call_state(
    call: Call,
    library: ProtocolLibrary | None = None,
    *,
    config: SchedulerConfig | None = None,
    now: dt.datetime | None = None,
    dispatch_table: DispatchPriorityTable | None = None,
) -> dict:
    """One call as the board shows it (the ``call`` payload of snapshots and ``call.updated``); ``call_states``
    passes the protocol library, the scheduler configuration and the dispatch table loaded once for the batch."""
    assessment = getattr(call, "assessment", None)  # the reverse one-to-one's error is an AttributeError
    priority = call_dispatch_priority(call, table=dispatch_table)
    summary = " ".join(call.transcript.split())
    if len(summary) > SUMMARY_CHARS:
        summary = summary[: SUMMARY_CHARS - 1] + "…"
    return {
        "id": call.pk,
        "external_id": call.external_id,
        "status": call.status,
        "live": is_live(call),
        "level": call.level,
        **call_aging(call, config or scheduler_config_load(), now or timezone.now()),
        "predicted_esi": assessment.predicted_esi if assessment else None,
        "overridden": bool(assessment and assessment.override_esi),
        "decision_point": assessment.decision_point if assessment else None,
        "reasons": list(assessment.reasons) if assessment else [],
        "uncertain": bool(assessment and assessment.uncertain),
        # held at the more urgent of the two levels an uncertain verdict named, until a dispatcher confirms one
        "held": bool(assessment and assessment.awaiting_confirmation and call.level != assessment.predicted_esi),
        "protocol": protocol_state(assessment, library),
        "dispatch_priority": priority.as_dict() if priority is not None else None,
        "off_protocol": call.off_protocol_sentences > 0,
        "guidance_brief": call.guidance_brief,
        "tier_id": call.tier_id,
        "preemption_count": call.preemption_count,
        "output_tokens": call.output_tokens,
        "created_at": _iso(call.created_at),
        "first_token_at": _iso(call.first_token_at),
        "done_at": _iso(call.done_at or call.failed_at or call.cancelled_at),
        "acknowledged": call.acknowledged_at is not None,
        "escalated": call.escalated_at is not None,  # recorded by the sweep (services/board.py)
        "acknowledged_by": call.acknowledged_by.get_username() if call.acknowledged_by_id else None,
        "assigned_to": call.assigned_to.get_username() if call.assigned_to_id else None,
        "incident_id": call.incident_id,
        "incident_confirmed": call.incident_confirmed_at is not None,
        "guidance_source_id": call.guidance_source_id,
        "triaged_at": _iso(call.triaged_at),
        "summary": summary,
        "location": call.location_address,
    }


def call_states(call_ids: Iterable[int]) -> dict[int, dict]:
    """``call_state`` for each existing call among ``call_ids`` (missing ids are simply absent)."""
    calls = Call.objects.filter(pk__in=list(call_ids)).select_related("tier", "assessment", "acknowledged_by", "assigned_to")
    library, config, now, table = load_library(), scheduler_config_load(), timezone.now(), dispatch_priority_table()
    return {c.pk: call_state(c, library, config=config, now=now, dispatch_table=table) for c in calls}


def tier_state(tier: Tier) -> dict:
    return {
        "id": tier.pk,
        "name": tier.name,
        "colour": tier.colour,
        "sort_order": tier.sort_order,
        "esi_levels": tier.esi_levels,
        "ttft_target_mean_s": tier.ttft_target_mean_s,
        "ttft_target_p90_s": tier.ttft_target_p90_s,
        "e2e_target_mean_s": tier.e2e_target_mean_s,
        "e2e_target_p90_s": tier.e2e_target_p90_s,
        "tpot_target_s": tier.tpot_target_s,
        "alert_repeat_s": tier.alert_repeat_s,
        "acknowledge_within_s": tier.acknowledge_within_s,
    }


def sort_calls(rows: Sequence[dict]) -> list[dict]:
    """Live queue order: effective (aged) level, untriaged last, then longest waiting first, then id."""
    return sorted(
        rows,
        key=lambda r: (
            r["effective_level"] if r["effective_level"] is not None else 6,
            dt.datetime.fromisoformat(r["created_at"]),
            r["id"],
        ),
    )


def queue_snapshot(*, with_metrics: bool = True) -> dict:
    """The whole board: live calls in queue order, tiers with their SLO targets, and metrics.

    The caller attaches the sequence number (taken *before* calling this; see ``realtime``).
    """
    now = timezone.now()
    tiers = {t.pk: tier_state(t) for t in Tier.objects.all()}
    config = scheduler_config_load()
    library, table = load_library(), dispatch_priority_table()
    rows = [call_state(c, library, config=config, now=now, dispatch_table=table) for c in live_calls()]
    snapshot = {
        "server_time": now.isoformat(),
        "calls": sort_calls(rows),
        "tiers": sorted(tiers.values(), key=lambda t: (t["sort_order"], t["name"])),
        "aging_enabled": config.aging_enabled,
    }
    if with_metrics:
        snapshot["metrics"] = board_metrics(now=now)
    return snapshot


# --- metrics -------------------------------------------------------------------------------------


def _summary(values: Sequence[float]) -> dict:
    p50, p90 = percentile(values, 50), percentile(values, 90)
    return {"p50": _round(p50), "p90": _round(p90), "n": len(values)}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def engine_metrics() -> dict:
    """What the inference worker last wrote to ``triage:engine:metrics`` (empty when stale or absent)."""
    raw = redis_text_client().hgetall(ENGINE_METRICS_KEY)
    if not raw:
        return {}
    try:
        values = {k: float(v) for k, v in raw.items()}
    except ValueError:
        return {}
    if time.time() - values.get("updated_at", 0) > ENGINE_METRICS_STALE_S:
        return {"stale": True}
    return values


def board_metrics(*, now: dt.datetime | None = None, window_s: int = METRICS_WINDOW_S) -> dict:
    """The metrics panel over a sliding window of finished calls (docs/architecture.md §4 definitions).

    Waiting time is completion − arrival; TTFT is first token − arrival; whether a call met its tier's SLO
    is the scheduler's own test (``scheduler.metrics.meets_slo``), so the board's attainment is the
    simulator's and the load test's.
    """
    now = now or timezone.now()
    since = now - dt.timedelta(seconds=window_s)
    finished = list(
        Call.objects.filter(status=CallStatus.DONE, done_at__gte=since)
        .order_by("-done_at")
        .values("level", "tier_id", "created_at", "first_token_at", "done_at")[:5000]
    )
    waiting_by_level: dict[str, list[float]] = {str(level): [] for level in ESI_LEVELS}
    ttft: list[float] = []
    tiers = {t.pk: t for t in Tier.objects.all()}
    targets = {pk: slo_targets(t.policy()) for pk, t in tiers.items()}
    slo_hits: dict[int, list[bool]] = {pk: [] for pk in tiers}
    for row in finished:
        waited = (row["done_at"] - row["created_at"]).total_seconds()
        if row["level"] in ESI_LEVELS:
            waiting_by_level[str(row["level"])].append(waited)
        first = (row["first_token_at"] - row["created_at"]).total_seconds() if row["first_token_at"] else None
        if first is not None:
            ttft.append(first)
        if row["tier_id"] in targets:
            ttft_target_s, e2e_target_s = targets[row["tier_id"]]
            slo_hits[row["tier_id"]].append(
                meets_slo(ttft_s=first, e2e_s=waited, ttft_target_s=ttft_target_s, e2e_target_s=e2e_target_s)
            )
    preemptions = AuditEvent.objects.filter(
        to_status=CallStatus.PREEMPTED, created_at__gte=now - dt.timedelta(seconds=PREEMPTION_WINDOW_S)
    ).count()
    engine = engine_metrics()
    queue_counts: dict[str, int] = {s: 0 for s in ACTIVE_STATUSES}
    for status in Call.objects.filter(status__in=ACTIVE_STATUSES).values_list("status", flat=True):
        queue_counts[status] += 1
    return {
        "at": now.isoformat(),
        "window_s": window_s,
        "waiting_s": {level: _summary(values) for level, values in waiting_by_level.items()},
        "ttft_s": _summary(ttft),
        "preemptions_per_min": round(preemptions * 60.0 / PREEMPTION_WINDOW_S, 2),
        "kv_use": _round(engine.get("kv_use")),
        "tokens_per_s": _round(engine.get("tokens_per_s"), 1),
        "engine_stale": bool(engine.get("stale")) or not engine,
        # the surge controller protects ESI 1-2 (worker/surge.py); the board shows the centre's mode
        "surge_protect": bool(engine.get("surge_protect")),
        "slo": [
            {
                "tier_id": pk,
                "name": tiers[pk].name,
                "attained": _round(slo_attainment(hits)),
                "n": len(hits),
            }
            for pk, hits in sorted(slo_hits.items(), key=lambda kv: (tiers[kv[0]].sort_order, tiers[kv[0]].name))
        ],
        "queue": queue_counts,
        "finished": len(finished),
    }
