"""What the inference worker keeps per live call about its guidance: the plan it is generated under, the stream
guard that holds each finished sentence to that plan, and whether a dispatcher asked for it to be generated
again (a protocol switch).

The engine loop's thread feeds tokens and finishes calls; the intake and control threads only record plans
and regeneration requests (single dict and set operations). No Django, no I/O.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .guard import Similarity, StreamGuards
from .plan import GuidancePlan


@dataclass(frozen=True)
class Followed:
    """How a call's generation ended, for the record: its plan, generation and off-protocol count."""

    plan: GuidancePlan | None
    generation: int
    off_protocol: int


class GuidanceFollower:
    def __init__(self, similarity: Similarity | None = None, threshold: float | None = None) -> None:
        self._plans: dict[str, tuple[GuidancePlan | None, int]] = {}
        self._guards = StreamGuards(similarity, threshold)
        self._replaced: set[str] = set()
        self._regenerating: set[str] = set()
        self._lock = threading.Lock()
        self.off_protocol_total = 0  # sentences flagged since start (metrics)
        self.strict = threshold is None

    def use_similarity(self, similarity: Similarity | None, threshold: float | None) -> None:
        """Strict matching (None) or a similarity threshold, for the calls admitted from now on."""
        self._guards = StreamGuards(similarity, threshold, started=self._guards)
        self.strict = threshold is None

    def read_out(self, plan: GuidancePlan | None) -> tuple[str, ...] | None:
        """The sentences a call's output is held to while generating: its plan's, under strict matching (the
        guard would accept nothing else); None with a similarity threshold (the model may reword) or no plan."""
        return plan.sentences if plan is not None and self.strict else None

    def admitted(self, request_id: str, plan: GuidancePlan | None, generation: int) -> None:
        """A call entered the engine to be generated under ``plan`` (None: not guarded)."""
        with self._lock:
            self._plans[request_id] = (plan, generation)
            self._replaced.discard(request_id)
        self._guards.forget(request_id)

    def on_token(self, request_id: str, text: str) -> str | None:
        """Feed a token; returns the protocol's own text when this token finished the call's first sentence
        that is off protocol (the board shows that text from then on), else None."""
        plan, _ = self._plans.get(request_id, (None, 0))
        if plan is None:
            return None
        if not self._guards.started(request_id):
            self._guards.start(request_id, plan.template)
        off = sum(not v.on_protocol for v in self._guards.feed(request_id, text))
        return self._flag(request_id, off, plan)

    def on_done(self, request_id: str) -> tuple[Followed, str | None]:
        """The call finished: its record, and the protocol's text if its last sentence first left the plan."""
        plan, generation = self._plans.pop(request_id, (None, 0))
        off, last = self._guards.finish(request_id)
        replacement = self._flag(request_id, sum(not v.on_protocol for v in last), plan) if plan else None
        self._replaced.discard(request_id)
        return Followed(plan, generation, off), replacement

    def regenerate(self, request_id: str) -> None:
        """A dispatcher switched the call's protocol: its current generation is to be cancelled and redone."""
        with self._lock:
            self._regenerating.add(request_id)

    def forget(self, request_id: str) -> None:
        """The call's generation ended without a result (it failed): drop what was followed of it."""
        self.on_cancelled(request_id)

    def on_cancelled(self, request_id: str) -> bool:
        """The engine cancelled the call; True when that was for a regeneration (admit it again)."""
        with self._lock:
            again = request_id in self._regenerating
            self._regenerating.discard(request_id)
            self._plans.pop(request_id, None)
            self._replaced.discard(request_id)
        self._guards.forget(request_id)
        return again

    def _flag(self, request_id: str, off: int, plan: GuidancePlan | None) -> str | None:
        if not off or plan is None:
            return None
        self.off_protocol_total += off
        if request_id in self._replaced:
            return None
        self._replaced.add(request_id)
        return plan.text
