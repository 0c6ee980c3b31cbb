"""The learned ESI head: multinomial logistic regression on [the call's word n-grams (TF-IDF), the explicit
algorithm's features], and its urgency-biased decision rule.

Decision rule (cost-sensitive, tuned for under-triage): with cumulative probabilities P(ESI <= k), the level
is the most urgent k whose cumulative probability reaches its threshold t_k. Thresholds below 0.5 make the
rule err toward the more urgent of two close levels. They are tuned on out-of-fold predictions of the
training corpus (folds by author), never on an evaluation set. ``judgement`` then combines the level with the
explicit algorithm's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .linear import LinearHead
from .ngrams import CallInputs

N_LEVELS = 5


def decide_levels(probabilities: torch.Tensor, thresholds: Sequence[float]) -> torch.Tensor:
    """ESI 1-5 per row: the most urgent k with P(ESI <= k) >= thresholds[k-1]; ESI 5 if none."""
    cumulative = probabilities.cumsum(dim=1)[:, : N_LEVELS - 1]
    reached = cumulative >= torch.tensor(thresholds, dtype=cumulative.dtype)
    reached = torch.cat([reached, torch.ones_like(reached[:, :1])], dim=1)
    return reached.float().argmax(dim=1) + 1  # argmax returns the first True


@dataclass
class EsiClassifier:
    head: LinearHead
    thresholds: tuple[float, float, float, float]
    feature_names: tuple[str, ...]  # the clinical features the head was trained on, in its input order
    clinical_weight: float  # the clinical block's value beside the unit-length n-gram vector

    def probabilities(self, inputs: CallInputs) -> torch.Tensor:
        probs = self.head.probabilities(inputs.matrix(self.clinical_weight))
        return probs / probs.sum(dim=1, keepdim=True)  # exact float sums for callers that check them

    def levels(self, probabilities: torch.Tensor) -> list[int]:
        return decide_levels(probabilities, self.thresholds).tolist()

    def evidence(self, ngrams: dict[int, float], level: int, terms: Sequence[str], n: int = 3) -> tuple[str, ...]:
        """The ``n`` words or word pairs of a call that weigh most toward ``level`` against the other levels
        (weight x TF-IDF, relative to the mean over levels): what the model read, in the caller's words."""
        weight = self.head.weight[:, : len(terms)]
        relative = weight[level - 1] - weight.mean(dim=0)
        scored = sorted(((float(relative[j]) * x, j) for j, x in ngrams.items() if j < len(terms)), reverse=True)
        return tuple(terms[j].replace("_", " ") for score, j in scored[:n] if score > 0)
