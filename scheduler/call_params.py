"""The scheduling values a call carries to a vLLM server: one record, written into the OpenAI API's
``vllm_xargs`` by our pool (``inference/backends/vllm_pool.py``) and read back from vLLM's
``SamplingParams.extra_args`` by our plug-in (``inference/backends/vllm_scheduler.py``). Both sides use this
module alone, so they cannot disagree on a name, a type or a default; it imports no Django and nothing of
vLLM, because the plug-in loads it inside the vLLM server.

A request that carries none of these values (sent to the server by something else) is scheduled at the
level vLLM's own ``priority`` gives, clamped to the ESI scale, with the defaults below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from scheduler.config import (
    UNPREDICTED_OUTPUT_TOKENS,
    UNTRIAGED_LEVEL,
    SchedulerConfig,
    TierPolicy,
    clamp_level,
)

PREFIX = "triage_"  # our keys among vllm_xargs, which other plug-ins share


@dataclass(frozen=True)
class CallParams:
    """What the plug-in's rules need of one call: its level and predicted answer length, when it was accepted
    (Unix seconds: aging and FCFS count from it), its tier's preemption cap and aging, and the two scheduler
    settings the plug-in honours per request."""

    level: int
    predicted_tokens: int
    accepted_at: float
    max_preemptions: int = TierPolicy.max_preemptions  # a tier's own defaults
    aging_step_s: float = 0.0  # 0: the call does not age
    aging_ceiling: int = TierPolicy.aging_ceiling_level
    preempt_on_arrival: bool = True  # False: a waiting request never displaces a running one
    limited_c: float | None = None  # TRAIL's limited preemption: past c x its predicted length a call keeps its slot
    ref: str = ""  # the pool's name for this submission, echoed in the plug-in's PreemptionNotice

    @classmethod
    def for_call(cls, *, level: int, predicted_tokens: int, accepted_at: float, tier: TierPolicy,
                 config: SchedulerConfig, ref: str = "") -> CallParams:
        """A call's values under the administrator's current settings (aging switched off globally sends 0)."""
        return cls(level=int(level), predicted_tokens=int(predicted_tokens), accepted_at=float(accepted_at),
                   max_preemptions=int(tier.max_preemptions),
                   aging_step_s=float(tier.aging_step_s if config.aging_enabled else 0.0),
                   aging_ceiling=int(tier.aging_ceiling_level),
                   preempt_on_arrival=bool(config.preempt_on_arrival),
                   limited_c=None if config.limited_preemption_c is None else float(config.limited_preemption_c),
                   ref=ref)

    def to_extra_args(self) -> dict[str, int | float | bool | str]:
        """The ``vllm_xargs`` of a request (JSON scalars only: vLLM passes them through as they are)."""
        args: dict[str, int | float | bool | str] = {
            f"{PREFIX}level": self.level, f"{PREFIX}predicted_tokens": self.predicted_tokens,
            f"{PREFIX}accepted_at": self.accepted_at, f"{PREFIX}max_preemptions": self.max_preemptions,
            f"{PREFIX}aging_step_s": self.aging_step_s, f"{PREFIX}aging_ceiling": self.aging_ceiling,
            f"{PREFIX}preempt_on_arrival": self.preempt_on_arrival,
        }
        if self.ref:
            args[f"{PREFIX}ref"] = self.ref
        if self.limited_c is not None:
            args[f"{PREFIX}limited_c"] = self.limited_c
        return args

    @classmethod
    def from_extra_args(cls, extra: Mapping[str, Any] | None, *, priority: int | None, now: float) -> CallParams:
        """The values a request arrived with; whatever is missing takes the default (the level from vLLM's
        ``priority``, acceptance ``now``)."""
        extra = extra or {}

        def get(name: str, default: Any) -> Any:  # noqa: ANN401 - a JSON scalar
            return extra.get(f"{PREFIX}{name}", default)

        limited_c = get("limited_c", None)
        return cls(
            level=clamp_level(get("level", priority if priority is not None else UNTRIAGED_LEVEL)),
            predicted_tokens=int(get("predicted_tokens", UNPREDICTED_OUTPUT_TOKENS)),
            accepted_at=float(get("accepted_at", now)),
            max_preemptions=int(get("max_preemptions", cls.max_preemptions)),
            aging_step_s=float(get("aging_step_s", cls.aging_step_s)),
            aging_ceiling=int(get("aging_ceiling", cls.aging_ceiling)),
            preempt_on_arrival=bool(get("preempt_on_arrival", cls.preempt_on_arrival)),
            limited_c=None if limited_c is None else float(limited_c),
            ref=str(get("ref", "")),
        )

    @cached_property  # read at every step for every running request
    def tier(self) -> TierPolicy:
        """The tier rules the plug-in applies: the call's own level, its preemption cap and aging."""
        return TierPolicy(
            name=f"esi{self.level}", esi_levels=(self.level,), ttft_target_mean_s=0.0, ttft_target_p90_s=0.0,
            e2e_target_mean_s=0.0, e2e_target_p90_s=0.0, max_preemptions=self.max_preemptions,
            aging_step_s=self.aging_step_s, aging_ceiling_level=self.aging_ceiling,
        )
