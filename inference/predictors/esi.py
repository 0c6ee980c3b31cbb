"""ESI urgency classifier: a small MLP on [sentence embedding, vital-sign flags], averaged with a linear head on
hashed word n-gram TF-IDF features (``ngrams``), and an urgency-biased decision rule.

Probabilities: (1 - w) * softmax(MLP) + w * softmax(n-gram head), w chosen on out-of-fold predictions of TRAIN
(0 means the embedding head alone).

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
from .ngrams import tfidf

N_LEVELS = 5
DEFAULT_THRESHOLDS = (0.5, 0.5, 0.5, 0.5)


class NgramHead(nn.Module):
    """Multinomial logistic regression on TF-IDF n-grams; the fitted idf travels with the weights."""

    def __init__(self, buckets: int) -> None:
        super().__init__()
        self.linear = nn.Linear(buckets, N_LEVELS)
        self.register_buffer("idf", torch.zeros(buckets))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def logits(self, transcripts: Sequence[str]) -> torch.Tensor:
        return self.linear(tfidf(transcripts, self.idf))


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


def mix(embedding_probs: torch.Tensor, ngram_probs: torch.Tensor | None, ngram_weight: float) -> torch.Tensor:
    if ngram_probs is None or ngram_weight == 0:
        return embedding_probs
    return (1 - ngram_weight) * embedding_probs + ngram_weight * ngram_probs


@dataclass
class EsiClassifier:
    head: EsiHead
    thresholds: tuple[float, float, float, float]
    ngram_head: NgramHead | None = None
    ngram_weight: float = 0.0

    def probabilities(self, embeddings: torch.Tensor, transcripts: Sequence[str]) -> torch.Tensor:
        self.head.eval()
        with torch.inference_mode():
            probs = torch.softmax(self.head(esi_inputs(embeddings, transcripts)), dim=1)
            if self.ngram_head is None:
                return probs
            self.ngram_head.eval()
            return mix(probs, torch.softmax(self.ngram_head.logits(transcripts), dim=1), self.ngram_weight)

    def predict(
        self, embeddings: torch.Tensor, transcripts: Sequence[str]
    ) -> tuple[list[list[float]], list[int]]:
        probs = self.probabilities(embeddings, transcripts).double()
        probs = probs / probs.sum(dim=1, keepdim=True)  # exact float sums for callers that check them
        levels = decide_levels(probs, self.thresholds).tolist()
        return probs.tolist(), apply_danger_zone_rule(levels, transcripts)


def apply_danger_zone_rule(levels: Sequence[int], transcripts: Sequence[str]) -> list[int]:
    return cap_danger_zone(levels, danger_zone_vitals(transcripts))


def cap_danger_zone(levels: Sequence[int], danger: Sequence[bool]) -> list[int]:
    """ESI decision point D: a call quoting a danger-zone vital sign is at least ESI 2."""
    return [min(level, 2) if d else level for level, d in zip(levels, danger, strict=True)]
