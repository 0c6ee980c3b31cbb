"""The cost model's online correction: a momentum average of measured over predicted iteration times scales the
compute coefficients, so that a preset (or a calibration gone stale) follows the machine the engine runs on.

    predicted = iteration_s(decision, base)        the simulator's charge for a decision (``scheduler.simulator``)
    f <- mu * f + (1 - mu) * clip(measured / predicted, RATIO_MIN, RATIO_MAX)          f starts at 1, mu = 0.9
    corrected = base with alpha1, alpha2, gamma1, gamma2 and iteration_overhead_s times f; beta unchanged

beta is a host copy (PCIe or memory bandwidth), not compute, so a slower or faster model does not change it;
the KV capacity is not a time. Predictions always use the *base* model: predicting with the corrected one and
correcting again would compound the factor. Plain Python with no clock and no I/O: the executor measures (the
live engine, ``inference.engine.Engine.step``) and hands the corrected model to its scheduler.

Within the clip range f is a convex combination of 1 and clipped ratios, so it stays in [RATIO_MIN, RATIO_MAX]: a
cost model more than 20 times off is for ``calibrate`` to fit, not for this factor to absorb.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.cost import CostModel
from scheduler.decision import Decision
from scheduler.simulator import iteration_s

MOMENTUM = 0.9
# Below this a prediction is noise (an empty or cancelled batch): its ratio would be a division by ~0.
MIN_PREDICTED_S = 1e-5
# One sample is never allowed to wreck the factor: a stall (a garbage collection, the OS running web or Celery
# on a shared core, the first iteration's warm-up) can take 100 times the usual step; clipped, one such sample
# moves f by at most (1 - mu) * RATIO_MAX, and the momentum lets the following iterations undo it.
RATIO_MIN, RATIO_MAX = 0.05, 20.0
# The scheduler gets a corrected model only when f has moved this much (relative) since the one it has:
# each hand-over re-keys its queue (O(n log n)), so not at every iteration.
APPLY_THRESHOLD = 0.05


def corrected_cost_model(cost: CostModel, factor: float) -> CostModel:
    """``cost`` with its compute coefficients (alpha1, alpha2, gamma1, gamma2, iteration_overhead_s) times
    ``factor``; beta (a host copy) and the KV capacity unchanged. O(1)."""
    return replace(cost, alpha1=cost.alpha1 * factor, alpha2=cost.alpha2 * factor, gamma1=cost.gamma1 * factor,
                   gamma2=cost.gamma2 * factor, iteration_overhead_s=cost.iteration_overhead_s * factor)


class OnlineCorrection:
    """The factor f: a momentum average of measured / predicted iteration times. O(1) per observation."""

    def __init__(self, momentum: float = MOMENTUM) -> None:
        if not 0.0 <= momentum <= 1.0:
            raise ValueError("momentum must be in [0, 1]")
        self.momentum = momentum
        self.factor = 1.0
        self.samples = 0  # observations taken (skipped ones not counted)

    def observe(self, predicted_s: float, measured_s: float) -> bool:
        """f <- mu * f + (1 - mu) * clip(measured_s / predicted_s, RATIO_MIN, RATIO_MAX); a prediction below
        MIN_PREDICTED_S is skipped. Returns whether the sample was taken."""
        if predicted_s < MIN_PREDICTED_S:
            return False
        ratio = min(max(measured_s / predicted_s, RATIO_MIN), RATIO_MAX)
        self.factor = self.momentum * self.factor + (1.0 - self.momentum) * ratio
        self.samples += 1
        return True


class CostCorrector:
    """What an executor keeps: the base model it predicts with (never corrected itself), the online correction,
    and the factor last handed to its scheduler."""

    def __init__(self, base: CostModel, *, momentum: float = MOMENTUM, apply_threshold: float = APPLY_THRESHOLD):
        self.base = base
        self.correction = OnlineCorrection(momentum)
        self.apply_threshold = apply_threshold
        self.applied_factor = 1.0

    @property
    def factor(self) -> float:
        return self.correction.factor

    @property
    def model(self) -> CostModel:
        """The base model corrected by the factor last applied: the one the scheduler has."""
        return corrected_cost_model(self.base, self.applied_factor)

    def predict_s(self, decision: Decision) -> float:
        """Seconds the base model predicts for running ``decision``: what the simulator charges for it
        (``scheduler.simulator.iteration_s``), read before the iteration is accounted. O(b)."""
        return iteration_s(decision, self.base)

    def observe(self, predicted_s: float, measured_s: float) -> CostModel | None:
        """One iteration's prediction (``predict_s``) and measurement; the corrected model when f has moved more
        than ``apply_threshold`` (relative) from the factor last applied, which it then becomes; else None."""
        self.correction.observe(predicted_s, measured_s)
        if abs(self.factor - self.applied_factor) <= self.apply_threshold * self.applied_factor:
            return None
        self.applied_factor = self.factor
        return self.model
