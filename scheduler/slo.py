"""The SLO monitor and the surge controller: the loop that turns the tiers' targets into scheduling actions.

- ``SloWindow`` keeps each finished measurement of the last ``window_s`` seconds, by ESI level: TTFT (accept to
  the first token), TPOT (mean seconds per token after the first) and E2E. ``attainment`` gives, per level, the
  share of calls within the tier's mean target (``scheduler.metrics.share_within``, as the simulator and the
  load test count it) and whether the window's mean and p90 meet the tier's mean and p90 targets.
- ``ttft_at_risk`` predicts, from the queue and the cost model, whether a protected call still waiting for its
  first token will miss its tier's TTFT target: the prefills of the protected calls ahead of it (and its own), after the
  iteration in progress, added to what it has waited. Observed attainment lags a surge by a whole TTFT; the
  prediction sees the queue the moment the burst lands.
- ``SurgeController`` is the mode machine, with hysteresis: ``normal`` → ``protect`` when a protected level's
  attainment falls below ``enter_below`` or a protected call is at risk; back to ``normal`` only after
  ``min_dwell_s`` in which nothing was at risk and every protected level's attainment stayed at least
  ``leave_above`` (or no protected call was waiting or running: the burst is over). ``protect`` opens extra batch slots that only ESI-1 and ESI-2 calls may take (``surge_config``,
  ``SchedulerConfig.surge_extra_slots``): every waiting protected call gets its first token sooner, for a longer
  decode step, and the batch is widened only as far as keeps the protected tiers' TPOT target by the cost model
  (and the KV cache allows). The lower tiers keep the administrator's batch, so the extra width drains when the
  burst's urgent calls finish, and the mode can leave. The stage-merge switch (``strict``) is *not* what
  protect does: in a mass-casualty burst it lets no ESI-2 prefill share an ESI-1 decode and starves the lower
  tiers (docs/decisions/surge-control.md). No call is dropped or refused in any mode.

Plain Python on a caller's clock (the simulator's virtual one, the worker's wall clock): no thread, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from scheduler.config import ESI_LEVELS, PROTECTED_LEVELS, SchedulerConfig, TierPolicy
from scheduler.cost import CostModel
from scheduler.decision import Decision
from scheduler.metrics import share_within
from scheduler.policies import BaseScheduler
from scheduler.request import Request

WINDOW_S = 60.0
MEASURES = ("ttft", "tpot", "e2e")


# Degraded first in protect mode: their guidance is the protocol's key questions only (never ESI 1-2's).
BRIEF_GUIDANCE_LEVELS = tuple(level for level in ESI_LEVELS if level not in PROTECTED_LEVELS)


class SurgeMode(StrEnum):
    """``protect``: extra batch slots for ESI 1-2, and the other levels' guidance is the key questions only
    (``BRIEF_GUIDANCE_LEVELS``, applied by the inference worker at admission)."""

    NORMAL = "normal"
    PROTECT = "protect"


@dataclass(frozen=True)
class Attainment:
    """One level's window: per measure, calls counted, share within the per-call bound, mean, p90, targets met."""

    calls: dict[str, int]
    share: dict[str, float | None]  # None: no call measured in the window
    mean_s: dict[str, float | None]
    p90_s: dict[str, float | None]
    targets_met: dict[str, bool | None]  # mean <= mean target and p90 <= p90 target (TPOT: both vs its target)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def _targets(tier: TierPolicy) -> dict[str, tuple[float, float]]:
    """Per measure: (mean target: each call's bound for the share, p90 target)."""
    return {"ttft": (tier.ttft_target_mean_s, tier.ttft_target_p90_s), "tpot": (tier.tpot_target_s, tier.tpot_target_s),
            "e2e": (tier.e2e_target_mean_s, tier.e2e_target_p90_s)}


@dataclass
class SloWindow:
    """The last ``window_s`` seconds of measurements, by level. O(1) to record; O(n log n) for attainment."""

    window_s: float = WINDOW_S
    _samples: dict[str, deque[tuple[float, int, float]]] = field(
        default_factory=lambda: {m: deque() for m in MEASURES})

    def first_token(self, level: int, ttft_s: float, at_s: float) -> None:
        self._samples["ttft"].append((at_s, level, max(0.0, ttft_s)))

    def done(self, level: int, e2e_s: float, tpot_s: float | None, at_s: float) -> None:
        self._samples["e2e"].append((at_s, level, max(0.0, e2e_s)))
        if tpot_s is not None:
            self._samples["tpot"].append((at_s, level, max(0.0, tpot_s)))

    def attainment(self, now_s: float, tier_of: Mapping[int, TierPolicy]) -> dict[int, Attainment]:
        by_level: dict[int, dict[str, list[float]]] = {level: {m: [] for m in MEASURES} for level in ESI_LEVELS}
        for measure, samples in self._samples.items():
            while samples and samples[0][0] < now_s - self.window_s:
                samples.popleft()
            for _, level, value in samples:
                by_level[level][measure].append(value)
        out = {}
        for level, values in by_level.items():
            targets = _targets(tier_of[level])
            calls, share, mean, p90, met = {}, {}, {}, {}, {}
            for m, xs in values.items():
                mean_target, p90_target = targets[m]
                calls[m] = len(xs)
                if not xs:
                    share[m] = mean[m] = p90[m] = met[m] = None
                    continue
                share[m] = share_within(xs, mean_target)
                mean[m], p90[m] = sum(xs) / len(xs), _p90(xs)
                met[m] = mean[m] <= mean_target and p90[m] <= p90_target
            out[level] = Attainment(calls, share, mean, p90, met)
        return out


def ttft_at_risk(waiting: Iterable[Request], running: Iterable[Request], cost: CostModel, config: SchedulerConfig,
                 now_s: float, protected: tuple[int, ...] = PROTECTED_LEVELS) -> bool:
    """Whether a protected request without its first token is predicted to miss its TTFT target: its wait so
    far, plus one decode step of the running batch, plus the prefills of the protected requests ahead of it in
    urgency and arrival order (its own included), one after another. A lower bound on its TTFT (no batching of
    the prefills' decodes, no preemption costs): at risk means at risk. O(n log n)."""
    pending = sorted((r for r in waiting if r.level in protected and r.first_token_s is None),
                     key=lambda r: (r.level, r.arrival_s))
    if not pending:
        return False
    t = now_s + cost.decode_step_s(sum(r.context_tokens for r in running))
    for r in pending:
        t += cost.prefill_s(max(1, r.pending_tokens), r.kv_tokens)
        if t - r.arrival_s > config.tier_for(r.tier, r.level).ttft_target_p90_s:
            return True
    return False


MAX_BATCH_WIDENING = 4  # protect mode's batch is at most this many times the administrator's


def protect_batch_size(base: SchedulerConfig, cost: CostModel, mean_context_tokens: float,
                       protected: tuple[int, ...] = PROTECTED_LEVELS) -> int:
    """The widest batch (the administrator's at least, ``MAX_BATCH_WIDENING`` times it at most) whose decode step,
    by the cost model at ``mean_context_tokens`` a request, keeps the protected tiers' TPOT target with the
    share of it less urgent prefills may take (``lower_prefill_share``). O(1)."""
    tpot = min(base.tier_for(None, level).tpot_target_s for level in protected)
    budget = tpot * (1.0 - base.lower_prefill_share) - cost.iteration_overhead_s - cost.gamma2
    per_request = cost.gamma1 * max(1.0, mean_context_tokens)
    widest = int(budget / per_request) if budget > 0 else base.batch_size
    return max(base.batch_size, min(MAX_BATCH_WIDENING * base.batch_size, widest))


def protected_idle(scheduler: BaseScheduler) -> bool:
    """No protected-level request waits or runs in ``scheduler``. O(n)."""
    pending = (*scheduler.requests.values(), *scheduler.arrival_buffer)
    return not any(r.level in PROTECTED_LEVELS for r in pending)


def surge_config(base: SchedulerConfig, mode: SurgeMode, cost: CostModel, mean_context_tokens: float
                 ) -> SchedulerConfig:
    """The configuration a mode runs: ``base`` (the administrator's) in normal mode; in protect mode the batch
    widened for the protected levels as far as ``protect_batch_size`` allows."""
    if mode is SurgeMode.PROTECT:
        extra = protect_batch_size(base, cost, mean_context_tokens) - base.batch_size
        return base.with_changes(surge_extra_slots=extra)
    return base


@dataclass
class SurgeController:
    enter_below: float = 0.95  # a protected level's TTFT or TPOT share under this: protect
    leave_above: float = 0.98  # ... and every one at least this, for min_dwell_s, to go back
    min_dwell_s: float = 30.0
    min_calls: int = 3  # a share over fewer calls is not evidence
    protected: tuple[int, ...] = PROTECTED_LEVELS
    mode: SurgeMode = SurgeMode.NORMAL
    since_s: float = 0.0  # when the current mode was entered
    calm_since_s: float | None = None  # protect mode: since when every signal has been good

    def update(self, now_s: float, attainment: Mapping[int, Attainment], at_risk: bool, *, widened_in_use: bool = False,
               protected_idle: bool = False) -> SurgeMode | None:
        """The new mode when it changes now, else None. ``widened_in_use``: protected calls hold the extra slots;
        leaving now would narrow the batch under them, so the calm starts only once it has drained to its
        normal width. ``protected_idle``: no protected call waits or runs, so the window's past misses no
        longer say anything about the queue (the burst is over): they neither hold the mode nor enter it."""
        shares = [a.share[m] for level, a in attainment.items() if level in self.protected for m in ("ttft", "tpot")
                  if a.share[m] is not None and a.calls[m] >= self.min_calls]
        worst = min(shares, default=1.0)
        if self.mode is SurgeMode.NORMAL:
            if at_risk or (worst < self.enter_below and not protected_idle):
                return self._enter(SurgeMode.PROTECT, now_s)
            return None
        if at_risk or widened_in_use or (worst < self.leave_above and not protected_idle):
            self.calm_since_s = None
            return None
        if self.calm_since_s is None:
            self.calm_since_s = now_s
        if now_s - self.calm_since_s >= self.min_dwell_s and now_s - self.since_s >= self.min_dwell_s:
            return self._enter(SurgeMode.NORMAL, now_s)
        return None

    def _enter(self, mode: SurgeMode, now_s: float) -> SurgeMode:
        self.mode, self.since_s, self.calm_since_s = mode, now_s, None
        return mode


UNMEASURED_CONTEXT_TOKENS = 512.0  # a request's context before any runs (a prompt and a plan's read-out)


@dataclass
class SurgeDriver:
    """The monitor and the controller over one scheduler, on its caller's clock: ``decide`` at most every
    ``every_s`` returns the configuration to run when the mode changes. The simulator and the inference worker
    both drive it; ``admin`` is the administrator's configuration, without the surge's changes."""

    admin: SchedulerConfig
    window: SloWindow = field(default_factory=SloWindow)
    controller: SurgeController = field(default_factory=SurgeController)
    every_s: float = 1.0
    _next_s: float = float("-inf")
    last_risk: bool = False
    last_attainment: dict[int, Attainment] = field(default_factory=dict)

    @property
    def mode(self) -> SurgeMode:
        return self.controller.mode

    def decide(self, now_s: float, scheduler: BaseScheduler) -> SchedulerConfig | None:
        if now_s < self._next_s:
            return None
        self._next_s = now_s + self.every_s
        waiting = [r for r in scheduler.requests.values() if r.first_token_s is None]
        waiting += list(scheduler.arrival_buffer)
        self.last_risk = ttft_at_risk(waiting, scheduler.running, scheduler.cost, self.admin, now_s)
        self.last_attainment = self.window.attainment(
            now_s, {level: self.admin.tier_for(None, level) for level in ESI_LEVELS})
        mode = self.controller.update(now_s, self.last_attainment, self.last_risk,
                                      widened_in_use=len(scheduler.running) > self.admin.batch_size,
                                      protected_idle=protected_idle(scheduler))
        return None if mode is None else self.effective(scheduler)

    def decide_observed(self, now_s: float, *, protected_idle: bool) -> SurgeMode | None:
        """``decide`` for an executor whose queue is not in this process (a vLLM pool: the servers hold it): the
        window's attainment alone, nothing predicted. Returns the new mode when it changes (at most every
        ``every_s``); there is no configuration to run, the servers schedule."""
        if now_s < self._next_s:
            return None
        self._next_s = now_s + self.every_s
        self.last_risk = False
        self.last_attainment = self.window.attainment(
            now_s, {level: self.admin.tier_for(None, level) for level in ESI_LEVELS})
        return self.controller.update(now_s, self.last_attainment, False, protected_idle=protected_idle)

    def effective(self, scheduler: BaseScheduler) -> SchedulerConfig:
        """The administrator's configuration with the current mode's changes."""
        running = scheduler.running
        context = sum(r.context_tokens for r in running) / len(running) if running else UNMEASURED_CONTEXT_TOKENS
        return surge_config(self.admin, self.mode, scheduler.cost, context)


class SimulatedSurgeLoop:
    """The worker's loop on the simulator's clock (``scheduler.simulator``): measurements from the tokens as the
    simulator delivers them, the driver's decision once a second of virtual time, the mode's configuration
    applied from the next decision on; ``changes`` lists (time, mode)."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.driver = SurgeDriver(config)
        self.first_token_s: dict[str, float] = {}
        self.changes: list[tuple[float, str]] = []

    def on_token(self, r: Request, index: int, t_s: float) -> None:
        if index == 1:
            self.first_token_s[r.id] = t_s
            self.driver.window.first_token(r.level, t_s - r.arrival_s, t_s)
        if r.true_output_tokens is not None and index >= r.true_output_tokens:
            first = self.first_token_s.pop(r.id, t_s)
            self.driver.window.done(r.level, t_s - r.arrival_s, (t_s - first) / (index - 1) if index > 1 else None, t_s)

    def observe(self, clock: float, decision: Decision, scheduler: BaseScheduler) -> None:
        config = self.driver.decide(clock, scheduler)
        if config is not None:
            scheduler.update_config(config)
            self.changes.append((round(clock, 3), str(self.driver.mode)))
