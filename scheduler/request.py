"""A generation request as the scheduler sees it: its urgency, its lengths, where its KV cache lives.

Token accounting (shared by every executor):
- ``context_tokens = prompt_tokens + generated_tokens``.
- A prefill iteration computes the KV of every *pending* token and emits one new token.
- A decode iteration feeds the last emitted token and emits one new token.
- So after the first prefill ``kv_tokens == context_tokens - 1``: the newest token's KV is computed
  by the next step. A request needs a prefill iteration while ``pending_tokens > 1`` (its prompt, or the
  tail of its context that was dropped at preemption); otherwise it can decode.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum


class Stage(StrEnum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    PREEMPTED_SWAPPED = "preempted_swapped"
    PREEMPTED_DROPPED = "preempted_dropped"
    DONE = "done"
    CANCELLED = "cancelled"


FINISHED_STAGES = frozenset({Stage.DONE, Stage.CANCELLED})
ACCEPTANCE_TRACE_ROUNDS = 8  # acceptance estimates kept per request (LAPS-SD's stability test reads the last few)


@dataclass(eq=False)
class Request:
    id: str
    level: int  # ESI 1..5 after overrides; 1 is most urgent
    arrival_s: float
    prompt_tokens: int
    predicted_output_tokens: int
    tier: str | None = None
    client: str = ""  # the call system that sent the call: fair share within a level (policies/fair_share.py)
    # Known to the simulator (and the clairvoyant oracle) only; the live engine leaves it None.
    true_output_tokens: int | None = None
    generated_tokens: int = 0
    stage: Stage = Stage.WAITING
    kv_tokens_on_device: int = 0
    kv_tokens_on_host: int = 0
    preemptions: int = 0
    # Refined (TRAIL) prediction of the tokens still to come; None: use predicted_output_tokens.
    refined_remaining_tokens: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    payload: dict = field(default_factory=dict, repr=False)  # executor-owned data (e.g. the prompt text)
    # Speculative decoding as the executor observed it: steps that verified drafts, tokens drafted and accepted,
    # and the running acceptance estimate (accepted / drafted) after each of the last such steps.
    draft_rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_trace: deque = field(default_factory=lambda: deque(maxlen=ACCEPTANCE_TRACE_ROUNDS), repr=False)

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated_tokens

    @property
    def kv_tokens(self) -> int:
        return self.kv_tokens_on_device + self.kv_tokens_on_host

    @property
    def pending_tokens(self) -> int:
        """Tokens whose KV must be computed before the next token can be emitted."""
        return self.context_tokens - self.kv_tokens

    @property
    def needs_prefill(self) -> bool:
        return self.pending_tokens > 1 or self.generated_tokens == 0

    @property
    def predicted_remaining_tokens(self) -> float:
        if self.refined_remaining_tokens is not None:
            return max(1.0, self.refined_remaining_tokens)
        return max(1.0, self.predicted_output_tokens - self.generated_tokens)

    @property
    def is_finished(self) -> bool:
        return self.stage in FINISHED_STAGES

    def record_draft_round(self, drafted: int, accepted: int) -> None:
        """One step verified ``drafted`` draft tokens and kept ``accepted`` of them (the executor reports it)."""
        if drafted <= 0:
            return
        self.draft_rounds += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        self.acceptance_trace.append(self.accepted_tokens / self.drafted_tokens)
