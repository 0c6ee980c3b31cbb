"""Scheduling policies, all on one interface (``scheduler.decision.Scheduler``), built by name.

    scheduler = make_scheduler(SchedulerConfig(policy="semantic"), PRESETS["a100-4b"])
"""

from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.cost import CostModel
from scheduler.policies.base import BaseScheduler
from scheduler.policies.fcfs import FcfsScheduler
from scheduler.policies.hpjf import HpjfScheduler
from scheduler.policies.laps import LapsScheduler
from scheduler.policies.oracle import OracleScheduler
from scheduler.policies.semantic import SemanticScheduler
from scheduler.policies.sjf import SjfScheduler
from scheduler.policies.slide import SlideScheduler
from scheduler.policies.trail import TrailScheduler

POLICIES: dict[str, type[BaseScheduler]] = {
    cls.name: cls
    for cls in (
        SemanticScheduler, OracleScheduler, FcfsScheduler, SjfScheduler, HpjfScheduler, LapsScheduler,
        SlideScheduler, TrailScheduler,
    )
}


def make_scheduler(config: SchedulerConfig, cost: CostModel) -> BaseScheduler:
    """The scheduler named by ``config.policy``; raises ValueError for an unknown name."""
    try:
        cls = POLICIES[config.policy]
    except KeyError:
        raise ValueError(f"unknown policy {config.policy!r}; choose from {sorted(POLICIES)}") from None
    return cls(config, cost)


__all__ = ["POLICIES", "BaseScheduler", "make_scheduler"]
