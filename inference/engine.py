"""The inference engine: one `step()` = ask the scheduler -> carry out preemptions -> run the batch -> report.

The scheduler (`scheduler/`) decides everything about priority; the engine only executes. State the
scheduler owns (stage, generated_tokens, kv_tokens_*) lives on its `Request`; the engine keeps the token ids
and text of each request in a `Sequence` and the KV tensors in the model runner (running batch) and the KV
store (everything else).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from inference.guidance.read_out import ReadOutConstraint
from inference.kv_store import KVLocation, KVStore
from inference.model_runner import ModelRunner, RowInput
from inference.speculation import Draft, NgramIndex, draft, drafts_allowed
from scheduler.config import SchedulerConfig
from scheduler.cost_correction import CostCorrector
from scheduler.decision import Decision, KVUsage, Preemption, PreemptionMode, Scheduler
from scheduler.policies import make_scheduler
from scheduler.request import Request, Stage

log = logging.getLogger("inference.engine")
MIN_OUTPUT_ROOM = 128


class TextCodec(Protocol):
    eos_token_id: int
    pad_token_id: int
    max_positions: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: list[int]) -> str: ...


class LengthRefiner(Protocol):
    """TRAIL: turns the probe layer's hidden state at each step into a refined remaining-length estimate."""

    layer: int

    def observe(self, request_id: str, hidden, generated_tokens: int) -> float: ...  # noqa: ANN001

    def forget(self, request_id: str) -> None: ...


@dataclass
class Sequence:
    request: Request
    token_ids: list[int]
    prompt_len: int
    max_new_tokens: int
    text: str = ""
    read_out: ReadOutConstraint | None = None  # the output may only be these sentences (strict guidance)
    lookup: NgramIndex = field(default_factory=NgramIndex)  # where speculative drafts come from
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len :]


@dataclass(frozen=True)
class TokenEvent:
    request_id: str
    index: int  # 0-based position of the token in the output
    token_id: int
    text: str  # the new text this token completes ("" while a multi-byte character is incomplete)


@dataclass(frozen=True)
class FinishedEvent:
    request_id: str
    text: str
    output_tokens: int
    reason: str  # "eos", "length", "cancelled" or "error" (the model failed on its batch: see ``error``)
    token_ids: tuple[int, ...] = ()
    error: str = ""
    drafted_tokens: int = 0  # speculative decoding: tokens drafted for this request, and those the model accepted
    accepted_tokens: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None


@dataclass
class StepResult:
    stage: Stage | None
    batch_ids: list[str] = field(default_factory=list)
    tokens: list[TokenEvent] = field(default_factory=list)
    finished: list[FinishedEvent] = field(default_factory=list)
    preempted: list[tuple[str, PreemptionMode, int]] = field(default_factory=list)  # (id, mode, kept tokens)
    paused_ids: list[str] = field(default_factory=list)
    started_ids: list[str] = field(default_factory=list)  # ran for the first time (first token this step)
    # began computing its prompt and has no token yet (vLLM's pool learns it only from a preemption notice)
    prefilling_ids: list[str] = field(default_factory=list)
    duration_s: float = 0.0


class Engine:
    def __init__(
        self,
        runner: ModelRunner,
        codec: TextCodec,
        scheduler: Scheduler,
        *,
        max_new_tokens: int = 384,
        clock: Callable[[], float] = time.time,
        refiner: LengthRefiner | None = None,
        speculative_tokens: int = 0,
        cost_correction: bool = True,
    ) -> None:
        """``speculative_tokens``: the most draft tokens verified per request and step (0: no speculation);
        drafts come from the sequence itself and the read-out (``inference.speculation``). ``cost_correction``:
        measured iteration times correct the scheduler's cost model (``scheduler.cost_correction``)."""
        self.runner = runner
        self.store: KVStore = runner.store
        self.codec = codec
        self.scheduler = scheduler
        self.max_new_tokens = max_new_tokens
        self.clock = clock
        self.refiner = refiner
        self.speculative_tokens = speculative_tokens
        # Keeps the base cost model; None: off, or a scheduler without a cost model (a scripted one)
        self.cost_corrector = CostCorrector(scheduler.cost) if cost_correction and hasattr(scheduler, "cost") else None
        self.sequences: dict[str, Sequence] = {}
        self.tokens_generated = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.iterations = 0
        self.preemptions_by_mode: Counter[str] = Counter()

    # --- intake (safe from another thread: a dict insert, then the scheduler's O(1) submit) -----------
    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        *,
        level: int,
        predicted_output_tokens: int,
        tier: str | None = None,
        arrival_s: float | None = None,
        max_new_tokens: int | None = None,
        payload: dict | None = None,
        read_out: Iterable[str] | None = None,
        client: str = "",
    ) -> Request:
        """Queue a request. ``read_out``: the sentences its output may consist of (each whole, at most once, then
        EOS); every other token is masked (``inference.guidance.read_out``). ``client``: the call system, for fair
        share within a level (``scheduler.policies.fair_share``)."""
        ids = self.codec.encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_new = max_new_tokens or self.max_new_tokens
        # Leave room for at least MIN_OUTPUT_ROOM tokens of guidance (generation also stops at max_positions);
        # an over-long transcript keeps its end, where the "Guidance:" cue is.
        room = max(1, self.codec.max_positions - min(max_new, MIN_OUTPUT_ROOM))
        if len(ids) > room:
            ids = ids[-room:]
        request = Request(
            id=request_id,
            level=level,
            tier=tier,
            client=client,
            arrival_s=self.clock() if arrival_s is None else arrival_s,
            prompt_tokens=len(ids),
            predicted_output_tokens=max(1, int(predicted_output_tokens)),
            payload=payload or {},
        )
        constraint = None
        if read_out is not None:
            constraint = ReadOutConstraint.from_text(list(read_out), self.codec.encode, self.codec.eos_token_id)
        self.sequences[request_id] = Sequence(request, ids, len(ids), max_new, read_out=constraint)
        self.scheduler.submit(request)
        return request

    def cancel(self, request_id: str) -> None:
        self.scheduler.cancel(request_id)

    def replace_scheduler(self, successor: Scheduler) -> None:
        """Hand every live request to ``successor`` (a policy change) and drive it from the next step, with the
        engine's base cost model corrected (whatever model it was built with: never corrected twice)."""
        self.scheduler.hand_over(successor, now_s=self.clock())
        self.scheduler = successor
        if self.cost_corrector is not None:
            successor.update_config(cost=self.cost_corrector.model)

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None:
        self.scheduler.reprioritise(request_id, level, tier)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # --- the loop -----------------------------------------------------------------------------------
    def step(self) -> StepResult:
        started = time.perf_counter()
        decision = self.scheduler.schedule(self.clock())
        result = StepResult(stage=decision.stage, batch_ids=[r.id for r in decision.batch])
        self._cancel(decision, result)
        for preemption in decision.preemptions:
            self._preempt(preemption, result)
        result.paused_ids = [r.id for r in decision.paused]
        if not decision.is_idle:
            emitted: dict[str, int] = {}
            predicted_s = self.cost_corrector.predict_s(decision) if self.cost_corrector is not None else 0.0
            ran = time.perf_counter()
            try:
                finished_ids, emitted = self._run(decision, result)
            except Exception as error:  # noqa: BLE001 - a batch's failure (e.g. out of memory) ends its requests, not the engine
                finished_ids = self._fail_batch(decision, result, error)
            else:
                self._correct_cost(predicted_s, time.perf_counter() - ran)
            self.scheduler.complete_iteration(self.clock(), decision, finished_ids, emitted)
            self.iterations += 1
        result.duration_s = time.perf_counter() - started
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "iteration stage=%s batch=%d tokens=%d finished=%d preempted=%s kv_device=%d kv_host=%d ms=%.1f",
                decision.stage, len(decision.batch), len(result.tokens), len(result.finished),
                [(rid, str(mode), kept) for rid, mode, kept in result.preempted],
                self.kv_tokens_on_device(), self.store.host_tokens(), result.duration_s * 1e3,
            )
        return result

    def _correct_cost(self, predicted_s: float, measured_s: float) -> None:
        """One iteration's time to the online correction; the corrected cost model (None until due) to the scheduler."""
        if self.cost_corrector is not None and (corrected := self.cost_corrector.observe(predicted_s, measured_s)):
            self.scheduler.update_config(cost=corrected)

    def _cancel(self, decision: Decision, result: StepResult) -> None:
        for r in decision.cancelled:
            self.runner.discard([r.id])
            seq = self.sequences.pop(r.id, None)
            if self.refiner is not None:
                self.refiner.forget(r.id)
            if seq is not None:
                result.finished.append(FinishedEvent(r.id, seq.text, len(seq.output_ids), "cancelled", tuple(seq.output_ids)))

    def _preempt(self, p: Preemption, result: StepResult) -> None:
        rid = p.request.id
        self.runner.release([rid])
        if self.store.location(rid) is KVLocation.NONE:
            return  # nothing resident (already dropped)
        if p.mode is PreemptionMode.SWAP:
            self.store.swap_out(rid)
        elif p.mode is PreemptionMode.DROP or p.kept_tokens <= 0:
            self.store.drop(rid)
        else:
            self.store.keep_prefix(rid, p.kept_tokens)
        self.preemptions_by_mode[str(p.mode)] += 1
        result.preempted.append((rid, p.mode, p.kept_tokens))

    def _run(self, decision: Decision, result: StepResult) -> tuple[list[str], dict[str, int]]:
        rows, may_draft = [], drafts_allowed(decision.batch)
        for r in decision.batch:
            seq = self.sequences[r.id]
            cached = self.runner.cached_tokens(r.id)
            if r.generated_tokens == 0 and r.preemptions == 0 and cached == 0:
                result.started_ids.append(r.id)
            allowed = seq.read_out.allowed() if seq.read_out is not None else None
            new = seq.token_ids[cached:]
            proposal = self._draft(seq) if len(new) == 1 and may_draft else None
            if proposal is None or not proposal.token_ids:
                rows.append(RowInput(r.id, new, allowed))
            else:
                rows.append(RowInput(r.id, new + list(proposal.token_ids), allowed, proposal.token_ids,
                                     proposal.allowed_after))
        outputs = self.runner.step(rows)
        drafted = {row.request_id: len(row.draft) for row in rows}
        finished_ids: list[str] = []
        emitted: dict[str, int] = {}
        for out in outputs:
            seq = self.sequences[out.request_id]
            seq.drafted_tokens += drafted[out.request_id]
            seq.accepted_tokens += len(out.accepted)
            self.drafted_tokens += drafted[out.request_id]
            self.accepted_tokens += len(out.accepted)
            seq.request.record_draft_round(drafted[out.request_id], len(out.accepted))  # LAPS-SD reads it
            reason = None
            for token_id in out.token_ids:
                seq.token_ids.append(token_id)
                if seq.read_out is not None:
                    seq.read_out.advance(token_id)
                index = len(seq.token_ids) - seq.prompt_len - 1
                if token_id == self.codec.eos_token_id:
                    reason = "eos"
                elif index + 1 >= seq.max_new_tokens or len(seq.token_ids) >= self.codec.max_positions:
                    reason = "length"
                self.tokens_generated += 1
                emitted[out.request_id] = emitted.get(out.request_id, 0) + 1
                result.tokens.append(TokenEvent(out.request_id, index, token_id, self._detokenize(seq)))
                if reason is not None:
                    break  # an accepted draft past the end is not output
            if reason is not None:
                finished_ids.append(out.request_id)
                result.finished.append(FinishedEvent(
                    out.request_id, seq.text, len(seq.output_ids), reason, tuple(seq.output_ids),
                    drafted_tokens=seq.drafted_tokens, accepted_tokens=seq.accepted_tokens))
            elif self.refiner is not None and out.hidden is not None:
                remaining = self.refiner.observe(out.request_id, out.hidden, len(seq.output_ids))
                self.scheduler.refine_remaining(out.request_id, remaining)
        if finished_ids:
            self.runner.discard(finished_ids)
            for rid in finished_ids:
                self.sequences.pop(rid, None)
                if self.refiner is not None:
                    self.refiner.forget(rid)
        return finished_ids, emitted

    def _draft(self, seq: Sequence) -> Draft | None:
        """A draft for a decoding request, at most as long as its remaining room less the step's own token."""
        if not self.speculative_tokens:
            return None
        room = min(seq.max_new_tokens - len(seq.output_ids), self.codec.max_positions - len(seq.token_ids)) - 1
        return draft(seq.token_ids, seq.lookup, min(self.speculative_tokens, room), seq.read_out)

    def _fail_batch(self, decision: Decision, result: StepResult, error: Exception) -> list[str]:
        """The model raised on this batch: its requests end with reason "error" (their caches released, their
        partial tokens of this step dropped), so the caller decides whether to submit them again."""
        log.exception("model step failed for batch %s", [r.id for r in decision.batch])
        ids = [r.id for r in decision.batch]
        result.tokens = [t for t in result.tokens if t.request_id not in ids]
        try:
            self.runner.discard(ids)
        except Exception:  # noqa: BLE001 - the runner's state for these requests is gone either way
            log.exception("discarding the failed batch's caches failed")
        for rid in ids:
            seq = self.sequences.pop(rid, None)
            if self.refiner is not None:
                self.refiner.forget(rid)
            if seq is not None:
                result.finished.append(FinishedEvent(rid, seq.text, len(seq.output_ids), "error", (),
                                                     f"{type(error).__name__}: {error}"[:300]))
        return ids

    def _detokenize(self, seq: Sequence) -> str:
        """The text the newest token adds; held back while it ends in an incomplete UTF-8 character."""
        text = self.codec.decode(seq.output_ids)
        if text.endswith("\ufffd"):
            return ""
        delta = text[len(seq.text) :]
        seq.text = text
        return delta

    # --- what the worker reads and changes (inference.executor.Executor) --------------------------------
    constrains_read_out = True  # add_request's read_out is enforced token by token

    @property
    def policy_name(self) -> str:
        return self.scheduler.name

    def running_ids(self) -> list[str]:
        return list(self.runner.batch_ids)

    def kv_usage(self) -> KVUsage:
        return self.scheduler.kv_usage()

    def kv_tokens_on_device(self) -> int:
        return self.store.device_tokens() + sum(self.runner.cached_tokens(rid) for rid in self.runner.batch_ids)

    def kv_tokens_on_host(self) -> int:
        return self.store.host_tokens()

    def reconfigure(self, config: SchedulerConfig) -> None:
        """Apply new settings between iterations; a new policy takes over every live request."""
        if config.policy != self.scheduler.name:
            self.replace_scheduler(make_scheduler(config, self.scheduler.cost))
        else:
            self.scheduler.update_config(config)

    def current_config(self) -> SchedulerConfig:
        return self.scheduler.config

    # --- conveniences -------------------------------------------------------------------------------

    def run_until_idle(self, max_steps: int = 1_000_000) -> dict[str, FinishedEvent]:
        """Step until the scheduler has no work; return every request's final event by id."""
        done: dict[str, FinishedEvent] = {}
        for _ in range(max_steps):
            if not self.has_work():
                break
            for event in self.step().finished:
                done[event.request_id] = event
        return done

    def generate(self, prompts: Iterable[str | list[int]], *, level: int = 3, predicted_output_tokens: int = 64) -> list[str]:
        """Run prompts to completion through the scheduler; outputs in the order given."""
        ids = []
        for i, prompt in enumerate(prompts):
            rid = f"gen-{self.iterations}-{i}"
            self.add_request(rid, prompt, level=level, predicted_output_tokens=predicted_output_tokens)
            ids.append(rid)
        done = self.run_until_idle()
        return [done[rid].text for rid in ids]
