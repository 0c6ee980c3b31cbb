"""Which administrator settings apply when guidance is generated on vLLM servers (``INFERENCE_BACKEND=vllm``).

Our engine honours every scheduler setting; on vLLM the servers own batching, memory and the order of work
inside a step, so some settings cannot act there. Each setting of ``SchedulerSettings`` and of a ``Tier`` (the
admin's fields, named as ``SchedulerConfig`` and ``TierPolicy``) is listed here once, with how vLLM honours it
or why it does not apply; the admin shows the second kind on the field itself, and the inference worker logs
them when it starts on vLLM and whenever one of them is changed (``inference/backends/vllm_pool.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.config import SchedulerConfig


@dataclass(frozen=True)
class OnVllm:
    applies: bool
    how: str  # how it is honoured on vLLM, or why it is not


def _honoured(how: str) -> OnVllm:
    return OnVllm(True, how)


def _not_applying(why: str) -> OnVllm:
    return OnVllm(False, why)


SCHEDULER_SETTINGS: Mapping[str, OnVllm] = {
    "policy": _not_applying("the servers run the policy they were started with (VLLM_POLICY; semantic: our "
                            "--scheduler-cls plug-in)"),
    "batch_size": _not_applying("each server's --max-num-seqs (VLLM_MAX_NUM_SEQS) bounds its batch"),
    "kv_capacity_blocks": _not_applying("vLLM sizes its own KV cache (--gpu-memory-utilization)"),
    "block_size": _not_applying("vLLM's own --block-size"),
    "preempt_on_arrival": _honoured("by the router and, per request, by the plug-in"),
    "preempt_within_level": _not_applying("on vLLM only a more urgent level displaces a running request: a "
                                          "victim there is recomputed from its first token"),
    "limited_preemption_c": _honoured("per request, by the plug-in"),
    "aging_enabled": _honoured("per request, by the router and the plug-in"),
    "stage_merge": _not_applying("vLLM mixes prefill chunks and decodes in every step; the plug-in orders the "
                                 "step's token budget by urgency instead"),
    "lower_prefill_share": _not_applying("vLLM mixes prefill chunks and decodes in every step; the plug-in "
                                         "orders the step's token budget by urgency instead"),
    "eviction": _not_applying("vLLM recomputes every victim (it has no swap); prefix caching finds its full "
                              "blocks again while memory allows"),
    "micro_batch_max": _honoured("triage workers, whatever generates the guidance"),
    "micro_batch_wait_ms": _honoured("triage workers, whatever generates the guidance"),
    "guard_similarity_threshold": _honoured("the inference worker's stream guard, whatever generates the text"),
}

TIER_SETTINGS: Mapping[str, OnVllm] = {
    "name": _honoured("calls are routed and measured by tier"),
    "colour": _honoured("the board"),
    "sort_order": _honoured("the board and the admin"),
    "esi_levels": _honoured("calls are routed and measured by tier"),
    "ttft_target_mean_s": _honoured("the SLO monitor, the surge controller and the reports"),
    "ttft_target_p90_s": _honoured("the SLO monitor and the reports"),
    "e2e_target_mean_s": _honoured("the SLO monitor and the reports"),
    "e2e_target_p90_s": _honoured("the SLO monitor and the reports"),
    "tpot_target_s": _honoured("the SLO monitor and the surge controller"),
    "tdg_weight": _honoured("the reports (TDG)"),
    "max_preemptions": _honoured("per request, by the plug-in"),
    "reserved_kv_fraction": _not_applying("vLLM's KV cache has no per-tier reservation"),
    "aging_step_s": _honoured("per request, by the router and the plug-in"),
    "aging_ceiling_level": _honoured("per request, by the router and the plug-in"),
    "alert_repeat_s": _honoured("the board"),
    "acknowledge_within_s": _honoured("the board"),
}


def not_applying_note(on_vllm: OnVllm) -> str:
    """The admin's line under a field that does not apply on vLLM."""
    return f"Not applied under INFERENCE_BACKEND=vllm: {on_vllm.how}."


def not_applied(config: SchedulerConfig) -> list[str]:
    """Every setting in ``config`` that vLLM does not apply, with its value (``name=value``; a tier's as
    ``tier NAME: name=value``): what the worker logs when it starts on vLLM. O(fields x tiers)."""
    return [line for line, _ in _not_applied(config)]


def changed_but_not_applied(old: SchedulerConfig, new: SchedulerConfig) -> list[str]:
    """The settings an administrator changed from ``old`` to ``new`` that vLLM does not apply, each with why."""
    before = set(not_applied(old))
    return [f"{line} ({why})" for line, why in _not_applied(new) if line not in before]


def _not_applied(config: SchedulerConfig) -> list[tuple[str, str]]:
    """(``name=value`` line, why vLLM does not apply it) for each such setting in ``config``."""
    lines = [(f"{name}={getattr(config, name)!r}", on_vllm.how) for name, on_vllm in SCHEDULER_SETTINGS.items()
             if not on_vllm.applies and hasattr(config, name)]
    for tier in config.tiers.values():
        lines += [(f"tier {tier.name}: {name}={getattr(tier, name)!r}", on_vllm.how)
                  for name, on_vllm in TIER_SETTINGS.items() if not on_vllm.applies and hasattr(tier, name)]
    return lines
