"""Word n-grams of a call, weighted by TF-IDF: what the learned heads read of the caller's own words.

The vocabulary is every word and word pair that at least ``min_df`` training calls use; a term's weight in a
call is (1 + log count) x idf, and each call's vector has unit length, so a rambling call and a terse one
weigh the same. Words are the lower-case letters and digits of the transcript (apostrophes kept inside a
word); pairs never cross a sentence end. Vectorising is O(words) per call; the vocabulary and idf are part of
the trained bundle, so serving needs no encoder and no download.
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

_SENTENCE = re.compile(r"[.!?;\n]+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})



def terms(transcript: str, max_n: int = 2) -> list[str]:
    """The words of ``transcript`` and its runs of up to ``max_n`` adjacent words within a sentence."""
    out: list[str] = []
    for sentence in _SENTENCE.split(transcript.lower().translate(_APOSTROPHES)):
        words = _WORD.findall(sentence)
        out += words
        for n in range(2, max_n + 1):
            out += ["_".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    return out


@dataclass(frozen=True)
class NgramVectoriser:
    vocabulary: dict[str, int]  # term -> column
    idf: tuple[float, ...]  # per column: log(n_calls / calls using the term)
    max_n: int

    @classmethod
    def fit(cls, transcripts: Sequence[str], *, max_n: int = 2, min_df: int = 3) -> NgramVectoriser:
        """The terms used by at least ``min_df`` of ``transcripts``, in sorted order (stable across runs)."""
        df = Counter(t for text in transcripts for t in set(terms(text, max_n)))
        kept = sorted(t for t, count in df.items() if count >= min_df)
        n = max(1, len(transcripts))
        return cls({t: i for i, t in enumerate(kept)}, tuple(math.log(n / df[t]) for t in kept), max_n)

    @property
    def dim(self) -> int:
        return len(self.vocabulary)

    def rows(self, transcripts: Iterable[str]) -> list[dict[int, float]]:
        """Per call, its non-zero columns and unit-length TF-IDF weights."""
        out = []
        for text in transcripts:
            counts = Counter(j for t in terms(text, self.max_n) if (j := self.vocabulary.get(t)) is not None)
            weights = {j: (1.0 + math.log(c)) * self.idf[j] for j, c in counts.items()}
            norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
            out.append({j: w / norm for j, w in sorted(weights.items())})
        return out

    def to_json(self) -> dict[str, Any]:
        terms_in_order = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        return {"max_n": self.max_n, "terms": terms_in_order, "idf": list(self.idf)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NgramVectoriser:
        return cls({t: i for i, t in enumerate(data["terms"])}, tuple(float(x) for x in data["idf"]), int(data["max_n"]))


@dataclass(frozen=True)
class CallInputs:
    """What the heads read of a batch of calls: each call's n-gram weights and the columns of its clinical
    features (``clinical_features``) that are on. Each head takes the n-grams with the clinical block at its
    own weight (``matrix``)."""

    ngrams: tuple[dict[int, float], ...]
    n_terms: int
    clinical: tuple[tuple[int, ...], ...]
    n_clinical: int

    def __len__(self) -> int:
        return len(self.ngrams)

    def subset(self, rows: Sequence[int]) -> CallInputs:
        return CallInputs(tuple(self.ngrams[i] for i in rows), self.n_terms, tuple(self.clinical[i] for i in rows),
                          self.n_clinical)

    def matrix(self, clinical_weight: float) -> torch.Tensor:
        """A CSR matrix (float64), one row per call: [n-gram weights | clinical features x ``clinical_weight``];
        without the clinical block when the weight is 0."""
        crow, cols, values = [0], [], []
        for grams, clinical in zip(self.ngrams, self.clinical, strict=True):
            cols += list(grams)
            values += list(grams.values())
            if clinical_weight:
                cols += [self.n_terms + j for j in clinical]
                values += [clinical_weight] * len(clinical)
            crow.append(len(cols))
        width = self.n_terms + (self.n_clinical if clinical_weight else 0)
        with warnings.catch_warnings():  # CSR products are all the heads need; torch calls CSR support "beta"
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
            return torch.sparse_csr_tensor(
                torch.tensor(crow, dtype=torch.int64), torch.tensor(cols, dtype=torch.int64),
                torch.tensor(values, dtype=torch.float64), size=(len(self.ngrams), width), check_invariants=False,
            )
