"""Runs the model on a batch of requests, each with its own KV cache: prepares inputs, runs one forward pass.

One forward pass serves prefill and decode alike: each request feeds the tokens whose KV it lacks (its
prompt, a dropped tail, or just its newest token) and gets the next token back. Rows are aligned by left
padding: the past caches are right-aligned in a padded batch cache, the new tokens right-aligned after them,
so each row's last position is its newest token. A 2-D attention mask hides the padding (holes in the middle
are fine), and explicit position ids give every row its own positions, so a request's output does not depend
on its batch mates.

The running batch's cache stays batched across iterations while its membership is unchanged (the common
decode case), whatever order the scheduler lists it in; when a request leaves, its compact cache goes back to
the KV store; when one joins, its rows are appended. The runner knows nothing about priorities: the engine
tells it what to run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from inference.batch_cache import batch_cache
from inference.kv_store import KVStore

MIN_HOLES_TO_COMPACT = 32


@dataclass
class RowInput:
    request_id: str
    new_token_ids: list[int]  # the tokens whose KV this request lacks, oldest first (at least one), then `draft`
    allowed: Sequence[int] | None = None  # the only token ids the next one may be (a constrained read-out)
    draft: Sequence[int] = ()  # speculative tokens ending new_token_ids, verified in this pass (inference.speculation)
    draft_allowed: Sequence[Sequence[int] | None] = ()  # the constraint after each draft token


@dataclass
class RowOutput:
    request_id: str
    next_token_id: int  # the model's own token after the accepted draft tokens
    hidden: torch.Tensor | None = None  # the probe layer's hidden state at the position that chose it
    accepted: tuple[int, ...] = ()  # the draft's longest prefix the model agreed with: emitted before next_token_id

    @property
    def token_ids(self) -> list[int]:
        return [*self.accepted, self.next_token_id]


class ModelRunner:
    def __init__(self, model: torch.nn.Module, store: KVStore, pad_token_id: int, probe_layer: int | None = None):
        self.model = model
        self.store = store
        self.pad_token_id = pad_token_id
        self.probe_layer = probe_layer
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        # The running batch: row order, its batched cache ([layers][2] tensors [B, H, T, D]) and mask [B, T].
        self._ids: list[str] = []
        self._layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._mask: torch.Tensor | None = None
        # The transformers cache over `_layers`, kept from one step to the next while the membership is unchanged
        # (its layers append in place, batch_cache.py); None after a membership change rebuilt `_layers`.
        self._cache: Cache | None = None

    # --- the batch's membership ----------------------------------------------------------------------
    @property
    def batch_ids(self) -> list[str]:
        return list(self._ids)

    def cached_tokens(self, request_id: str) -> int:
        """KV tokens a request has, in the running batch or in the store."""
        if request_id in self._ids:
            return int(self._mask[self._ids.index(request_id)].sum())
        return self.store.tokens(request_id)

    def release(self, request_ids: Sequence[str]) -> None:
        """Move these requests' caches out of the running batch into the store (on the device)."""
        leaving = [rid for rid in request_ids if rid in self._ids]
        if not leaving:
            return
        for rid in leaving:
            row = self._ids.index(rid)
            keep = self._mask[row].bool()
            kv = torch.stack([torch.stack([k[row][:, keep], v[row][:, keep]]) for k, v in self._layers])
            self.store.put(rid, kv)
        self._keep_rows([i for i, rid in enumerate(self._ids) if rid not in leaving])

    def discard(self, request_ids: Sequence[str]) -> None:
        """Forget these requests' caches entirely (finished or cancelled)."""
        rows = [i for i, rid in enumerate(self._ids) if rid not in set(request_ids)]
        if len(rows) != len(self._ids):
            self._keep_rows(rows)
        for rid in request_ids:
            self.store.free(rid)

    def _keep_rows(self, rows: list[int]) -> None:
        self._cache = None
        if not rows:
            self._ids, self._layers, self._mask = [], [], None
            return
        index = torch.tensor(rows, device=self.device)
        mask = self._mask.index_select(0, index)
        # Columns that are padding in every remaining row are dead weight: trim them from the left.
        first_live = int(mask.any(0).nonzero()[0]) if mask.any() else mask.shape[1]
        self._ids = [self._ids[i] for i in rows]
        self._mask = mask[:, first_live:]
        self._layers = [
            (k.index_select(0, index)[:, :, first_live:], v.index_select(0, index)[:, :, first_live:])
            for k, v in self._layers
        ]

    def _assemble(self, request_ids: list[str]) -> None:
        """Make the running batch's membership exactly `request_ids`: members not asked for go to the store,
        the rest keep their rows (and order: policies re-rank the batch every step, and rebuilding the batched
        cache for a new order cost a third of the engine's time), joiners are appended from the store. Nothing is
        copied while the membership is unchanged; a join copies the batch once (a longer joiner widens it)."""
        wanted = set(request_ids)
        self.release([rid for rid in self._ids if rid not in wanted])
        present = set(self._ids)
        joining = [rid for rid in request_ids if rid not in present]
        if not joining:
            return
        caches = [self.store.take(rid) for rid in joining]
        lengths = [0 if kv is None else int(kv.shape[3]) for kv in caches]
        old_width = self._mask.shape[1] if self._mask is not None else 0
        width = max(old_width, *lengths)
        cfg = self.model.config
        n_layers = cfg.num_hidden_layers
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        buf = torch.zeros((n_layers, 2, len(joining), heads, width, head_dim), dtype=self.dtype, device=self.device)
        mask = torch.zeros((len(joining), width), dtype=torch.long, device=self.device)
        for row, (kv, length) in enumerate(zip(caches, lengths, strict=True)):
            if length:
                buf[:, :, row, :, width - length :] = kv
                mask[row, width - length :] = 1
        joined = [(buf[layer, 0], buf[layer, 1]) for layer in range(n_layers)]
        if self._ids:
            grow = width - old_width
            old_mask, old_layers = self._mask, self._layers
            if grow:  # the members' caches stay right-aligned: pad on the left
                old_mask = torch.nn.functional.pad(old_mask, (grow, 0))
                old_layers = [
                    (torch.nn.functional.pad(k, (0, 0, grow, 0)), torch.nn.functional.pad(v, (0, 0, grow, 0)))
                    for k, v in old_layers
                ]
            mask = torch.cat([old_mask, mask])
            joined = [
                (torch.cat([k, jk]), torch.cat([v, jv])) for (k, v), (jk, jv) in zip(old_layers, joined, strict=True)
            ]
        self._ids = self._ids + joining
        self._mask = mask
        self._layers = joined
        self._cache = None

    # --- one forward pass ------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self, rows: Sequence[RowInput]) -> list[RowOutput]:
        """Feed each row its new tokens on top of its cache; return each row's greedy next token (after the
        accepted part of its draft, if it has one).

        A batch mixing prefills with decodes would pad every decode row to the longest prefill; instead the
        prefill rows first compute the KV of all but their last token on their own (chunked prefill), then
        every row feeds one token (and its draft) in the shared step."""
        long_rows = [r for r in rows if len(r.new_token_ids) - len(r.draft) > 1]
        if long_rows and len(long_rows) < len(rows):
            self._prefill_apart([RowInput(r.request_id, r.new_token_ids[: -1 - len(r.draft)]) for r in long_rows])
            rows = [RowInput(r.request_id, r.new_token_ids[-1 - len(r.draft) :], r.allowed, r.draft, r.draft_allowed)
                    for r in rows]
        outputs = self._forward(rows)
        if any(r.draft for r in rows):
            self._compact_if_holey()
        return outputs

    def _compact_if_holey(self) -> None:
        """Rejected draft tokens leave masked columns inside rows; once they are a quarter of the batch's width,
        rebuild it without them (through the store: each row's live columns, then rejoined)."""
        if self._mask is None:
            return
        width = self._mask.shape[1]
        dead = width - int(self._mask.sum(1).max())
        if dead > max(MIN_HOLES_TO_COMPACT, width // 4):
            ids = list(self._ids)
            self.release(ids)
            self._assemble(ids)

    def _prefill_apart(self, rows: list[RowInput]) -> None:
        """Compute these rows' KV in a batch of their own; their caches end up in the store."""
        ids = [r.request_id for r in rows]
        self.release(ids)
        saved = (self._ids, self._layers, self._mask, self._cache)
        self._ids, self._layers, self._mask, self._cache = [], [], None, None
        try:
            self._forward(rows)
            self.release(ids)
        finally:
            self._ids, self._layers, self._mask, self._cache = saved

    def _forward(self, rows: Sequence[RowInput]) -> list[RowOutput]:
        self._assemble([r.request_id for r in rows])
        by_id = {r.request_id: r for r in rows}
        rows = [by_id[rid] for rid in self._ids]  # the batch's row order, not the caller's
        past_mask = self._mask
        batch, past_width = past_mask.shape
        new_width = max(len(r.new_token_ids) for r in rows)
        verified = 1 + max(len(r.draft) for r in rows)  # the positions whose next token is chosen (and checked)

        input_ids = torch.full((batch, new_width), self.pad_token_id, dtype=torch.long)
        new_mask = torch.zeros((batch, new_width), dtype=torch.long)
        positions = torch.zeros((batch, new_width), dtype=torch.long)
        past_lengths = past_mask.sum(1).tolist()
        for i, r in enumerate(rows):
            n = len(r.new_token_ids)
            input_ids[i, new_width - n :] = torch.tensor(r.new_token_ids)
            new_mask[i, new_width - n :] = 1
            positions[i, new_width - n :] = torch.arange(past_lengths[i], past_lengths[i] + n)
        new_mask = new_mask.to(self.device)
        attention_mask = torch.cat([past_mask, new_mask], dim=1)
        cache = self._cache
        if cache is None:  # the membership changed: wrap the rebuilt tensors (no copy)
            cache = batch_cache(self._layers if past_width else [], self.model.config.num_hidden_layers)

        out = self.model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask,
            position_ids=positions.to(self.device),
            past_key_values=cache,
            cache_position=torch.arange(past_width, past_width + new_width, device=self.device),
            use_cache=True,
            logits_to_keep=verified,
            output_hidden_states=self.probe_layer is not None,
        )
        chosen = _verify(out.logits[:, -verified:, :], rows)
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        if new_width > 1 and not bool(new_mask.all()):
            # Padded query positions may hold garbage (even NaN, from fully masked rows); zero their KV so that
            # a later `0 * garbage` in attention cannot poison the row (in place: the views share the buffers).
            pad_cols = (new_mask == 0)[:, None, :, None]
            for k, v in layers:
                k[:, :, past_width:].masked_fill_(pad_cols, 0)
                v[:, :, past_width:].masked_fill_(pad_cols, 0)
        for i, (r, tokens) in enumerate(zip(rows, chosen, strict=True)):
            rejected = len(r.draft) + 1 - len(tokens)
            if rejected:  # the rejected draft tokens' KV stays as a hole the mask hides (positions are explicit)
                attention_mask[i, attention_mask.shape[1] - rejected :] = 0
        self._layers = layers
        self._cache = cache
        self._mask = attention_mask
        hidden = out.hidden_states[self.probe_layer] if self.probe_layer is not None else None
        outputs = []
        for i, (r, tokens) in enumerate(zip(rows, chosen, strict=True)):
            at = new_width - 1 - (len(r.draft) + 1 - len(tokens))  # the position that chose the last token
            outputs.append(RowOutput(r.request_id, tokens[-1], None if hidden is None else hidden[i, at],
                                     tuple(tokens[:-1])))
        return outputs


def _verify(logits: torch.Tensor, rows: Sequence[RowInput]) -> list[list[int]]:
    """Each row's emitted tokens: the longest prefix of its draft that greedy decoding (under the row's constraint
    at every position) agrees with, then greedy decoding's own next token. ``logits``: [B, 1 + max draft, V], the
    rows right-aligned."""
    if not any(r.draft for r in rows):
        return [[t] for t in _greedy(logits[:, -1, :], [r.allowed for r in rows])]
    free = logits.argmax(-1).tolist()  # unconstrained greedy everywhere: the common case needs nothing more
    width = logits.shape[1]
    emitted = []
    for i, r in enumerate(rows):
        constraints = [r.allowed, *r.draft_allowed]
        tokens = []
        for j in range(len(r.draft) + 1):
            col = width - 1 - len(r.draft) + j
            allowed = constraints[j] if j < len(constraints) else None
            if allowed is None:
                token = free[i][col]
            elif len(allowed) == 1:
                token = allowed[0]
            else:
                token = _greedy(logits[i : i + 1, col, :], [allowed])[0]
            tokens.append(token)
            if j == len(r.draft) or token != r.draft[j]:
                break
        emitted.append(tokens)
    return emitted


def _greedy(logits: torch.Tensor, allowed: Sequence[Sequence[int] | None]) -> list[int]:
    """Each row's most likely next token, among its allowed ones where it has a constraint."""
    if any(a is not None for a in allowed):
        masked = torch.full_like(logits, float("-inf"))
        for row, ids in enumerate(allowed):
            if ids is None:
                masked[row] = logits[row]
            else:
                keep = torch.tensor(list(ids), dtype=torch.long, device=logits.device)
                masked[row, keep] = logits[row, keep]
        logits = masked
    return logits.argmax(-1).tolist()
