"""ESI urgency classifier: a small MLP on [sentence embedding, vital-sign flags], and an urgency-biased
decision rule.

Decision rule (cost-sensitive, tuned for under-triage): with cumulative probabilities
P(ESI <= k), predict the most urgent level k whose cumulative probability reaches its threshold t_k.
Thresholds below 0.5 make the rule err toward the more urgent of two close levels. They are tuned on
out-of-fold predictions of the TRAIN split (folds grouped by template), never on the test split. Decision
point D is applied as a rule on top: a call quoting a danger-zone vital sign is at least ESI 2 (the probabilities
are the head's, unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .lexical import LEXICAL_DIM, danger_zone_vitals, lexical_features

N_LEVELS = 5
DEFAULT_THRESHOLDS = (0.5, 0.5, 0.5, 0.5)


class EsiHead(nn.Module):
    def __init__(self, input_dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, N_LEVELS)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def esi_inputs(call_features: torch.Tensor, transcripts: Sequence[str]) -> torch.Tensor:
    """[pooled clause embeddings, vital-sign flags]."""
    return torch.cat([call_features, lexical_features(transcripts)], dim=1)


def input_dim(call_feature_dim: int) -> int:
    return call_feature_dim + LEXICAL_DIM


def decide_levels(probabilities: torch.Tensor, thresholds: Sequence[float]) -> torch.Tensor:
    """ESI 1-5 per row: the most urgent k with P(ESI <= k) >= thresholds[k-1]; ESI 5 if none."""
    cumulative = probabilities.cumsum(dim=1)[:, : N_LEVELS - 1]
    reached = cumulative >= torch.tensor(thresholds, dtype=cumulative.dtype)
    reached = torch.cat([reached, torch.ones_like(reached[:, :1])], dim=1)
    return reached.float().argmax(dim=1) + 1  # argmax returns the first True


@dataclass
class EsiClassifier:
    head: EsiHead
    thresholds: tuple[float, float, float, float]

    def probabilities(self, embeddings: torch.Tensor, transcripts: Sequence[str]) -> torch.Tensor:
        self.head.eval()
        with torch.inference_mode():
            return torch.softmax(self.head(esi_inputs(embeddings, transcripts)), dim=1)

    def predict(
        self, embeddings: torch.Tensor, transcripts: Sequence[str]
    ) -> tuple[list[list[float]], list[int]]:
        probs = self.probabilities(embeddings, transcripts).double()
        probs = probs / probs.sum(dim=1, keepdim=True)  # exact float sums for callers that check them
        levels = decide_levels(probs, self.thresholds).tolist()
        return probs.tolist(), apply_danger_zone_rule(levels, transcripts)


def apply_danger_zone_rule(levels: Sequence[int], transcripts: Sequence[str]) -> list[int]:
    return [min(level, 2) if danger else level for level, danger in zip(levels, danger_zone_vitals(transcripts), strict=True)]
