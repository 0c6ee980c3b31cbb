"""Draft tokens for speculative decoding without a draft model: prompt lookup, and the read-out's forced tokens.

Guidance reads out protocol sentences that are already in its prompt, so the next tokens are very often a
continuation of something the sequence holds: prompt-lookup decoding (Saxena 2023; vLLM's ``ngram`` method;
transformers' ``prompt_lookup_num_tokens``) proposes the tokens that followed the latest earlier occurrence of
the sequence's last n tokens. Under a strict read-out (``inference.guidance.read_out``) every token inside a
sentence is the only one the constraint allows: those are drafted for certain (SGLang's jump-forward decoding);
at a sentence boundary, where the model chooses, the lookup's proposal is drafted if the constraint allows it.

The model runner verifies a draft in the same forward pass as the step's own token (greedy, with the same
constraint at every position), keeps the longest agreeing prefix and adds the model's own next token, so the
output is the greedy output token for token; a rejected draft costs only the wider forward pass.
No torch, no Django.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from inference.guidance.read_out import ReadOutConstraint
from scheduler.config import PROTECTED_LEVELS
from scheduler.request import Request

MAX_NGRAM = 3  # the longest tail matched; a longer match is a better predictor (vLLM's prompt_lookup_max)
MIN_NGRAM = 1


@dataclass(frozen=True)
class Draft:
    token_ids: tuple[int, ...] = ()
    # the constraint after each draft token (None: unconstrained); verification applies it position by position
    allowed_after: tuple[Sequence[int] | None, ...] = ()


class NgramIndex:
    """One sequence's n-grams (MIN_NGRAM..MAX_NGRAM) -> where their latest occurrence's continuation starts.

    Grown incrementally as the sequence grows (O(MAX_NGRAM) per token), so a proposal is O(MAX_NGRAM + k)
    instead of a scan of the whole context."""

    def __init__(self) -> None:
        self._next: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # positions [0, _indexed) have their ending n-grams registered

    def propose(self, token_ids: Sequence[int], limit: int) -> list[int]:
        """Up to ``limit`` tokens that followed the latest earlier occurrence of the longest matching tail."""
        self._catch_up(token_ids)
        end = len(token_ids)
        for n in range(min(MAX_NGRAM, end), MIN_NGRAM - 1, -1):
            start = self._next.get(tuple(token_ids[end - n :]))
            if start is not None:
                return list(token_ids[start : start + limit])
        return []

    def _catch_up(self, token_ids: Sequence[int]) -> None:
        # An n-gram ending just before position p is registered once position p exists (it has a continuation);
        # the sequence's own tail is therefore never its own match.
        for p in range(max(1, self._indexed), len(token_ids)):
            for n in range(MIN_NGRAM, min(MAX_NGRAM, p) + 1):
                self._next[tuple(token_ids[p - n : p])] = p
        self._indexed = max(self._indexed, len(token_ids))


def draft(token_ids: Sequence[int], index: NgramIndex, limit: int, read_out: ReadOutConstraint | None) -> Draft:
    """Up to ``limit`` draft tokens to follow ``token_ids``."""
    if limit <= 0:
        return Draft()
    proposal = index.propose(token_ids, limit)
    if read_out is None:
        return Draft(tuple(proposal), (None,) * len(proposal))
    constraint = read_out.clone()
    tokens: list[int] = []
    allowed_after: list[Sequence[int]] = []
    options = constraint.allowed()
    on_proposal = True  # the draft so far is the proposal's prefix
    while len(tokens) < limit and not constraint.finished:
        i = len(tokens)
        if len(options) == 1:
            token = options[0]  # forced: the sentence goes on, or nothing is left but EOS
        elif on_proposal and i < len(proposal) and proposal[i] in options:
            token = proposal[i]  # the lookup's guess at a choice the model makes
        else:
            break
        on_proposal = on_proposal and i < len(proposal) and proposal[i] == token
        constraint.advance(token)
        tokens.append(token)
        options = constraint.allowed()
        allowed_after.append(options)
    return Draft(tuple(tokens), tuple(allowed_after))


def drafts_allowed(batch: Iterable[Request]) -> bool:
    """No drafts in a pass that carries an ESI 1-2 call's prefill: its first token waits for the whole pass, and
    verify rows make the pass several times wider (a surge's widened batch: docs/decisions/surge-control.md)."""
    return not any(r.level in PROTECTED_LEVELS and r.needs_prefill for r in batch)
