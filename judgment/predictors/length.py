"""Output-length predictor: ridge regression of log(output tokens) on the call's word n-grams.

The scheduler needs the expected length of the guidance the LLM will write for a call; a log-scale
regression keeps relative errors comparable between short and long answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .linear import LinearHead
from .ngrams import CallInputs

MIN_TOKENS = 1


@dataclass
class LengthPredictor:
    head: LinearHead
    log_mean: float  # the target is standardised: (log tokens - mean) / std
    log_std: float
    max_tokens: int

    def predict(self, inputs: CallInputs) -> list[int]:
        log_tokens = self.head.scores(inputs.matrix(0.0))[:, 0] * self.log_std + self.log_mean
        return [min(self.max_tokens, max(MIN_TOKENS, round(math.exp(v)))) for v in log_tokens.tolist()]
