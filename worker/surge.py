"""The surge controller on the inference worker's engine loop (``scheduler.slo``): once a second it reads the SLO
window the metrics keep and the engine's queue, and in protect mode runs the administrator's configuration with
extra batch slots for ESI 1-2 (``scheduler.slo.surge_config``) and admits calls of the other levels with the
protocol's key questions only (``brief_levels``; each such call audited ``call.guidance_brief``). Each change of mode is logged, audited
(``surge.mode_changed``, by ``system:inference``) and exported (``triage_surge_protect``; the board shows it).

On a vLLM pool the servers hold the queue and schedule it, so nothing can be predicted from it here and there
are no slots to open: the mode follows the window's observed attainment alone (``SurgeDriver.decide_observed``),
and protect mode degrades the lower levels' guidance to the key questions as on our engine (``widens`` is False,
``degrades`` True).
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, close_old_connections

from inference.executor import Executor
from scheduler.config import PROTECTED_LEVELS, SchedulerConfig
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
    def widens(self) -> bool:
        """Protect mode opens extra batch slots: only where the engine's scheduler runs in this process."""
        return self.enabled and self.scheduler is not None

    @property
    def degrades(self) -> bool:
        """Protect mode gives the lower levels key questions only: on every executor (the plan is ours)."""
        return self.enabled

    @property
    def mode(self) -> SurgeMode:
        return self.driver.mode

    def brief_levels(self) -> tuple[int, ...]:
        """The levels whose calls are admitted with key questions only: the lower tiers, in protect mode."""
        return BRIEF_GUIDANCE_LEVELS if self.degrades and self.driver.mode is SurgeMode.PROTECT else ()

    @property
    def admin(self) -> SchedulerConfig:
        return self.driver.admin

    def administrator_changed(self, config: SchedulerConfig) -> SchedulerConfig:
        """The administrator saved new settings: the configuration to run now (theirs, with the mode's changes)."""
        self.driver.admin = config.with_changes(surge_extra_slots=0)
        return self.driver.effective(self.scheduler) if self.scheduler is not None else self.driver.admin

    def tick(self, now_s: float | None = None) -> SurgeMode | None:
        """Decide at most every ``DECIDE_EVERY_S``; apply and record a change of mode. Engine loop thread only."""
        if not self.enabled:
            return None
        scheduler, now_s = self.scheduler, time.time() if now_s is None else now_s
        previous = self.driver.mode
        if scheduler is None:  # a vLLM pool: observed attainment only, nothing to reconfigure
            if self.driver.decide_observed(now_s, protected_idle=self._pool_protected_idle()) is None:
                return None
            config = self.driver.admin
        else:
            config = self.driver.decide(now_s, scheduler)
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

    def _pool_protected_idle(self) -> bool:
        """No ESI 1-2 call is waiting or generating in the pool (its sequences: every call it holds)."""
        sequences = getattr(self.engine, "sequences", {})
        return not any(seq.request.level in PROTECTED_LEVELS for seq in list(sequences.values()))
