"""The learned ESI head: a small MLP on [clause embeddings of the call, the explicit algorithm's features],
and its urgency-biased decision rule.

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
from torch import nn

N_LEVELS = 5


class EsiHead(nn.Module):
    def __init__(self, input_dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, N_LEVELS)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


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
    feature_names: tuple[str, ...]  # the clinical features the head was trained on, in its input order

    def probabilities(self, inputs: torch.Tensor) -> torch.Tensor:
        """``inputs``: [call embeddings, clinical feature vectors] (``esi_inputs``)."""
        self.head.eval()
        with torch.inference_mode():
            probs = torch.softmax(self.head(inputs), dim=1).double()
        return probs / probs.sum(dim=1, keepdim=True)  # exact float sums for callers that check them

    def levels(self, probabilities: torch.Tensor) -> list[int]:
        return decide_levels(probabilities, self.thresholds).tolist()


def esi_inputs(call_features: torch.Tensor, clinical: torch.Tensor) -> torch.Tensor:
    return torch.cat([call_features, clinical], dim=1)
