"""Output-length predictor: regression of log(output tokens) on the sentence embedding.

The scheduler needs the expected length of the guidance the LLM will write for a call; a log-scale
regression keeps relative errors comparable between short and long answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

MIN_TOKENS = 1


class LengthHead(nn.Module):
    def __init__(self, input_dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(input_dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


@dataclass
class LengthPredictor:
    head: LengthHead
    log_mean: float  # the target is standardised: (log tokens - mean) / std
    log_std: float
    max_tokens: int

    def predict(self, embeddings: torch.Tensor) -> list[int]:
        self.head.eval()
        with torch.inference_mode():
            log_tokens = self.head(embeddings).double() * self.log_std + self.log_mean
        return [min(self.max_tokens, max(MIN_TOKENS, round(math.exp(v)))) for v in log_tokens.tolist()]
