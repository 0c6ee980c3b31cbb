"""The learned protocol selector: which dispatch protocol (chief complaint) a call is for.

Multinomial logistic regression on the call's word n-grams (the ESI head's TF-IDF vocabulary, with the
clinical features at ``clinical_weight``) gives a probability per protocol id. Below the confidence threshold
the selection is ``unclear``: a dispatcher is read the family's key questions rather than a guess. The threshold is tuned on out-of-fold
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


def choose(probabilities: Sequence[float], ids: Sequence[str], threshold: float) -> ProtocolChoice:
    """The top protocol if its probability reaches ``threshold``, else unclear; with the runner-up either way."""
    order = sorted(range(len(ids)), key=lambda i: -probabilities[i])
    top, second = order[0], order[1]
    confidence = float(probabilities[top])
    return ProtocolChoice(
        protocol=ids[top] if confidence >= threshold else UNCLEAR, likeliest=ids[top], confidence=confidence,
        runner_up=ids[second], runner_up_confidence=float(probabilities[second]),
    )


@dataclass
class ProtocolClassifier:
    head: LinearHead
    ids: tuple[str, ...]  # the protocol ids in the head's output order
    threshold: float
    clinical_weight: float

    def probabilities(self, inputs: CallInputs) -> torch.Tensor:
        return self.head.probabilities(inputs.matrix(self.clinical_weight))

    def choices(self, probabilities: torch.Tensor) -> list[ProtocolChoice]:
        return [choose(row, self.ids, self.threshold) for row in probabilities.tolist()]
