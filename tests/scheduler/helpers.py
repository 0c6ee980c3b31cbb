"""Small builders shared by the scheduler tests."""

from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
from scheduler.policies import make_scheduler
from scheduler.policies.base import BaseScheduler
from scheduler.request import Request

# Round numbers so expected times can be worked out by hand.
COST = CostModel(alpha1=1e-7, alpha2=1e-4, gamma1=1e-6, gamma2=0.02, beta_s_per_token=1e-4, name="test")


def req(rid: str, level: int, *, prompt: int = 10, out: int = 5, arrival: float = 0.0, predicted: int | None = None,
        tier: str | None = None) -> Request:
    return Request(id=rid, level=level, arrival_s=arrival, prompt_tokens=prompt,
                   predicted_output_tokens=out if predicted is None else predicted, true_output_tokens=out, tier=tier)


def sched(policy: str = "semantic", **config) -> BaseScheduler:
    config.setdefault("batch_size", 2)
    config.setdefault("kv_capacity_blocks", 1000)
    config.setdefault("block_size", 4)
    return make_scheduler(SchedulerConfig(policy=policy, **config), COST)


def step(s: BaseScheduler, now: float = 0.0):
    """One iteration: decide, then finish whichever batch members reach their true length."""
    d = s.schedule(now)
    finished = [r.id for r in d.batch if r.generated_tokens + 1 >= r.true_output_tokens]
    s.complete_iteration(now, d, finished)
    return d
