"""The learned protocol selector: which dispatch protocol (chief complaint) a call is for.

Multinomial logistic regression on the call's word n-grams (the ESI head's TF-IDF vocabulary, with the
clinical features at ``clinical_weight``) gives a probability per protocol id. The selection is ``unclear`` when
the likeliest protocol's probability is below the confidence threshold, or when it leads the runner-up by less
than the margin (most confident errors are a sibling protocol of the same family, close behind): a dispatcher
is read the family's key questions rather than a guess. Threshold and margin are tuned on out-of-fold
predictions of the training corpus (folds by author), never on an evaluation set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .linear import LinearHead
from .ngrams import CallInputs

UNCLEAR = "unclear"


@dataclass(frozen=True)
class ProtocolChoice:
    protocol: str  # a protocol id, or "unclear" below the threshold
    likeliest: str  # the most probable protocol id (its family's questions are read when unclear)
    confidence: float  # the probability of ``likeliest``
    runner_up: str
    runner_up_confidence: float


def choose(probabilities: Sequence[float], ids: Sequence[str], threshold: float, margin: float = 0.0
           ) -> ProtocolChoice:
    """The top protocol if its probability reaches ``threshold`` and leads the runner-up's by at least
    ``margin``, else unclear; with the runner-up either way."""
    order = sorted(range(len(ids)), key=lambda i: -probabilities[i])
    top, second = order[0], order[1]
    confidence, runner_up = float(probabilities[top]), float(probabilities[second])
    clear = confidence >= threshold and confidence - runner_up >= margin
    return ProtocolChoice(
        protocol=ids[top] if clear else UNCLEAR, likeliest=ids[top], confidence=confidence,
        runner_up=ids[second], runner_up_confidence=runner_up,
    )


@dataclass
class ProtocolClassifier:
    head: LinearHead
    ids: tuple[str, ...]  # the protocol ids in the head's output order
    threshold: float
    clinical_weight: float
    margin: float = 0.0  # over the runner-up's probability

    def probabilities(self, inputs: CallInputs) -> torch.Tensor:
        return self.head.probabilities(inputs.matrix(self.clinical_weight))

    def choices(self, probabilities: torch.Tensor) -> list[ProtocolChoice]:
        return [choose(row, self.ids, self.threshold, self.margin) for row in probabilities.tolist()]
