"""The surge controller on the inference worker's engine loop (``scheduler.slo``): once a second it reads the SLO
window the metrics keep and the engine's queue, and in protect mode runs the administrator's configuration with
extra batch slots for ESI 1-2 (``scheduler.slo.surge_config``) and admits calls of the other levels with the
protocol's key questions only (``brief_levels``; each such call audited ``call.guidance_brief``). Each change of mode is logged, audited
(``surge.mode_changed``, by ``system:inference``) and exported (``triage_surge_protect``; the board shows it).

It acts on our own engine only: a vLLM pool schedules inside the vLLM servers, so there the loop measures and
reports but changes nothing (``acts`` is False).
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, close_old_connections

from inference.executor import Executor
from scheduler.config import SchedulerConfig
from scheduler.policies import BaseScheduler
from scheduler.slo import BRIEF_GUIDANCE_LEVELS, SloWindow, SurgeDriver, SurgeMode
from triage.services.surge import surge_mode_record

log = logging.getLogger("worker")
DECIDE_EVERY_S = 1.0


class SurgeLoop:
    def __init__(self, engine: Executor, window: SloWindow, *, enabled: bool = True) -> None:
        self.engine, self.enabled = engine, enabled
        # the administrator's configuration, without the surge's changes
        self.driver = SurgeDriver(engine.current_config(), window=window, every_s=DECIDE_EVERY_S)

    @property
    def scheduler(self) -> BaseScheduler | None:
        """The engine's own scheduler, where the engine has one in this process."""
        return getattr(self.engine, "scheduler", None)

    @property
    def acts(self) -> bool:
        return self.enabled and self.scheduler is not None

    @property
    def mode(self) -> SurgeMode:
        return self.driver.mode

    def brief_levels(self) -> tuple[int, ...]:
        """The levels whose calls are admitted with key questions only: the lower tiers, in protect mode."""
        return BRIEF_GUIDANCE_LEVELS if self.acts and self.driver.mode is SurgeMode.PROTECT else ()

    @property
    def admin(self) -> SchedulerConfig:
        return self.driver.admin

    def administrator_changed(self, config: SchedulerConfig) -> SchedulerConfig:
        """The administrator saved new settings: the configuration to run now (theirs, with the mode's changes)."""
        self.driver.admin = config.with_changes(surge_extra_slots=0)
        return self.driver.effective(self.scheduler) if self.scheduler is not None else self.driver.admin

    def tick(self, now_s: float | None = None) -> SurgeMode | None:
        """Decide at most every ``DECIDE_EVERY_S``; apply and record a change of mode. Engine loop thread only."""
        scheduler = self.scheduler
        if not self.enabled or scheduler is None:
            return None
        previous = self.driver.mode
        config = self.driver.decide(time.time() if now_s is None else now_s, scheduler)
        if config is None:
            return None
        self.engine.reconfigure(config)
        mode, attainment = self.driver.mode, self.driver.last_attainment
        protected = {str(level): {m: attainment[level].share[m] for m in ("ttft", "tpot")} for level in (1, 2)}
        log.warning("surge mode %s -> %s (predicted risk: %s; ESI 1-2 attainment %s; extra slots %d)",
                    previous, mode, self.driver.last_risk, protected, config.surge_extra_slots)
        try:
            close_old_connections()
            surge_mode_record(mode=str(mode), previous=str(previous), at_risk=self.driver.last_risk,
                              attainment=protected, extra_slots=config.surge_extra_slots)
        except DatabaseError:  # the mode applies regardless; the log above keeps the change
            log.exception("surge mode change not audited: the database refused")
        return mode
