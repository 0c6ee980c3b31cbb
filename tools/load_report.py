"""What `manage.py loadtest` reports of a run, read from the database: per ESI level the latencies, where the
time went, the share of calls within their tier's targets; preemptions, throughput, the token-level deadline
gain; ratios to FCFS; a plot."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from scheduler.metrics import percentile


def summarise(policy: str, call_ids: list[int], since: float | None = None) -> dict:
    """Per ESI level the latencies and, against each call's tier, the share of calls within its mean TTFT and
    its TPOT target (``scheduler.metrics.share_within``, as the simulator and the SLO monitor count); the
    surge controller's changes of mode since ``since`` (Unix seconds). ``tdg_ratio``: PROSERVE's token-level
    deadline gain (``scheduler.metrics.TdgAccumulator``) with each call's tokens taken as evenly spaced between
    its first and its last (the database keeps those two times, not every token's)."""
    from scheduler.config import SchedulerConfig
    from scheduler.metrics import TdgAccumulator
    from triage.models import ESI_LEVELS, AuditAction, AuditEvent, Call

    calls = list(Call.objects.filter(pk__in=call_ids).select_related("tier"))
    by_esi: dict[str, dict] = {}
    tdg = TdgAccumulator()
    for level in ESI_LEVELS:
        group = [c for c in calls if c.level == level and c.done_at and c.first_token_at]
        ttft = [(c.first_token_at - c.created_at).total_seconds() for c in group]
        e2e = [(c.done_at - c.created_at).total_seconds() for c in group]
        norm = [(c.done_at - c.created_at).total_seconds() / max(1, c.output_tokens) for c in group]
        # Where the TTFT went: accepted -> classified (Celery), queued -> first token (the LLM scheduler).
        triage = [(c.triaged_at - c.created_at).total_seconds() for c in group if c.triaged_at]
        engine = [(c.first_token_at - c.queued_at).total_seconds() for c in group if c.queued_at]
        # each call's tier, or the default tier of its level where the database has none (as the engine does)
        tiers = [c.tier.policy() if c.tier else SchedulerConfig().tier_for(None, level) for c in group]
        ttft_met = [t <= tier.ttft_target_mean_s for t, tier in zip(ttft, tiers, strict=True)]
        tpot_met = [(c.done_at - c.first_token_at).total_seconds() / (c.output_tokens - 1) <= tier.tpot_target_s
                    for c, tier in zip(group, tiers, strict=True) if c.output_tokens > 1]
        for c, first, tier in zip(group, ttft, tiers, strict=True):
            gap = (c.done_at - c.first_token_at).total_seconds() / max(1, c.output_tokens - 1)
            for index in range(1, max(1, c.output_tokens) + 1):
                tdg.token(index=index, t_s=first + (index - 1) * gap, arrival_s=0.0,
                          ttft_target_s=tier.ttft_target_mean_s, tpot_target_s=tier.tpot_target_s,
                          weight=tier.tdg_weight)
        by_esi[str(level)] = {
            "count": len(group), "ttft_p50": _p(ttft, 50), "ttft_p99": _p(ttft, 99),
            "ttft_attainment": round(sum(ttft_met) / len(ttft_met), 3) if ttft_met else None,
            "tpot_attainment": round(sum(tpot_met) / len(tpot_met), 3) if tpot_met else None,
            "e2e_p50": _p(e2e, 50), "e2e_p99": _p(e2e, 99),
            "normalized_wait_mean": round(sum(norm) / len(norm), 4) if norm else None,
            "triage_p50": _p(triage, 50), "queued_to_first_token_p50": _p(engine, 50),
        }
    preemptions = {"swap": 0, "recompute": 0, "partial": 0}
    for data in AuditEvent.objects.filter(call_id__in=call_ids, action=AuditAction.CALL_PREEMPTED).values_list("data", flat=True):
        mode = (data or {}).get("mode")
        key = {"drop": "recompute", "swap": "swap", "partial": "partial"}.get(mode)
        if key:
            preemptions[key] += 1
    # accepted -> classified over every call of the run: the triage stage alone (e.g. beside webhook traffic)
    triaged_s = [(c.triaged_at - c.created_at).total_seconds() for c in calls if c.triaged_at]
    done = [c for c in calls if c.done_at]
    tokens = sum(c.output_tokens for c in done)
    span = (max(c.done_at for c in done) - min(c.created_at for c in done)).total_seconds() if done else 0
    modes = []
    if since is not None:
        changed = AuditEvent.objects.filter(action=AuditAction.SURGE_MODE_CHANGED,
                                            created_at__gte=datetime.fromtimestamp(since, tz=UTC))
        modes = [(e.created_at.isoformat(), e.data.get("mode")) for e in changed.order_by("id")]
    shared = [c for c in done if c.guidance_source_id is not None]
    return {
        "policy": policy, "calls": len(calls), "completed": len(done), "by_esi": by_esi, "surge_modes": modes,
        # the LLM's work: calls whose guidance it generated, and linked calls that took another's instead
        "generated": len(done) - len(shared), "guidance_shared": len(shared), "output_tokens": tokens,
        "preemptions": preemptions, "throughput_tokens_per_s": round(tokens / span, 2) if span else None,
        "throughput_calls_per_s": round(len(done) / span, 3) if span else None,
        "tdg_ratio": round(tdg.ratio, 4), "triage_p50": _p(triaged_s, 50), "triage_p99": _p(triaged_s, 99),
    }


def _p(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else round(value, 4)


def ratios_to_fcfs(r: dict, fcfs: dict) -> dict:
    out = {}
    for level, s in r["by_esi"].items():
        base = fcfs["by_esi"][level]
        if s["ttft_p50"] and base["ttft_p50"]:
            out[f"esi{level}_ttft_p50"] = round(s["ttft_p50"] / base["ttft_p50"], 3)
    if r["throughput_tokens_per_s"] and fcfs["throughput_tokens_per_s"]:
        out["throughput"] = round(r["throughput_tokens_per_s"] / fcfs["throughput_tokens_per_s"], 3)
    return out


def plot_ttft(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        xs = [int(level) + i * width for level in r["by_esi"]]
        ax.bar(xs, [s["ttft_p50"] or 0 for s in r["by_esi"].values()], width=width, label=r["policy"])
    ax.set_xlabel("ESI level")
    ax.set_ylabel("TTFT p50 (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot written to {path}", file=sys.stderr)
