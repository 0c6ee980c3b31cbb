"""Hashed word n-gram TF-IDF features: what the caller literally says, next to what the sentence embedding sees.

A call's urgency often hangs on one short phrase ("he won't wake up", "she's drinking fine"); mean/max pooled
MiniLM embeddings blur such phrases with the scenario words around them, while word unigrams and bigrams keep
them. Out-of-fold on TRAIN (folds grouped by template), a linear model on these features alone beats the
embedding head on macro recall and under-triage, and averaging the two heads' probabilities beats both.

Features: lower-cased word unigrams and bigrams, hashed (CRC-32, stable across processes and platforms) into
``buckets`` columns; sublinear term frequency (1 + log tf) times an inverse document frequency fitted on
TRAIN (buckets seen in fewer than ``min_df`` training calls get weight 0), each row L2-normalised.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import torch

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
DEFAULT_BUCKETS = 1 << 14


def terms(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]


def _bucket(term: str, buckets: int) -> int:
    return zlib.crc32(term.encode("utf-8")) % buckets


def term_counts(texts: Sequence[str], buckets: int) -> torch.Tensor:
    """Dense (len(texts), buckets) float32 counts of hashed unigrams and bigrams."""
    counts = torch.zeros((len(texts), buckets), dtype=torch.float32)
    for row, text in enumerate(texts):
        for term in terms(text):
            counts[row, _bucket(term, buckets)] += 1.0
    return counts


def fit_idf(texts: Sequence[str], buckets: int = DEFAULT_BUCKETS, min_df: int = 2) -> torch.Tensor:
    """Smoothed idf per bucket, ln((1 + n) / (1 + df)) + 1, and 0 where df < min_df (rare terms are noise)."""
    df = (term_counts(texts, buckets) > 0).sum(dim=0).double()
    idf = torch.log((1 + len(texts)) / (1 + df)) + 1
    return torch.where(df >= min_df, idf, torch.zeros_like(idf)).float()


def tfidf(texts: Sequence[str], idf: torch.Tensor) -> torch.Tensor:
    counts = term_counts(texts, idf.shape[0])
    weighted = torch.where(counts > 0, 1 + torch.log(counts.clamp(min=1)), counts) * idf
    norms = weighted.norm(dim=1, keepdim=True).clamp(min=1e-12)
    return weighted / norms
