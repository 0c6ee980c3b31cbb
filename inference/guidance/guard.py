"""The guard on the stream: every finished sentence of the generated guidance is checked against the protocol's
own text before a dispatcher reads it as instruction.

Strict (the default): a sentence is on protocol when, normalised (case, spacing), it is one of the protocol's
sentences, with ``{patient}`` allowed to be any of its fills. With a similarity function and a threshold (a
deployment running a validated instruction model), a sentence is on protocol when its similarity to the
closest protocol sentence reaches the threshold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from judgment.protocols import PATIENT_FILLS, PATIENT_SLOT

# A sentence ends at ".", "?" or "!" followed by white space (or the end of the stream).
_END = re.compile(r"[.?!](?=\s)")
Similarity = Callable[[str, Sequence[str]], float]  # (sentence, protocol sentences) -> best similarity in [0, 1]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def sentence_pattern(sentence: str) -> re.Pattern[str]:
    """A protocol sentence as a pattern over normalised text; the slot matches any of its fills."""
    parts = [re.escape(part) for part in _norm(sentence).split(PATIENT_SLOT)]
    slot = "(?:" + "|".join(re.escape(f) for f in PATIENT_FILLS) + ")"
    return re.compile(slot.join(parts))


@dataclass(frozen=True)
class Verdict:
    sentence: str
    on_protocol: bool


class StreamGuard:
    """Fed the streamed text piece by piece; says of each finished sentence whether it is on protocol."""

    def __init__(self, sentences: Iterable[str], similarity: Similarity | None = None,
                 threshold: float | None = None) -> None:
        self.sentences = tuple(sentences)
        self._patterns = [sentence_pattern(s) for s in self.sentences]
        self._similarity = similarity if threshold is not None else None
        self._threshold = threshold
        self._buffer = ""
        self.verdicts: list[Verdict] = []

    def feed(self, text: str) -> list[Verdict]:
        """The verdicts of the sentences that ``text`` finished."""
        self._buffer += text
        out = []
        while (end := _END.search(self._buffer)) is not None:
            sentence, self._buffer = self._buffer[: end.end()], self._buffer[end.end():]
            out += self._judge(sentence)
        return out

    def finish(self) -> list[Verdict]:
        """The verdict of what is left when the stream ends."""
        rest, self._buffer = self._buffer, ""
        return self._judge(rest)

    @property
    def off_protocol(self) -> int:
        return sum(not v.on_protocol for v in self.verdicts)

    def check(self, sentence: str) -> bool:
        normalised = _norm(sentence)
        if any(p.fullmatch(normalised) for p in self._patterns):
            return True
        if self._similarity is not None and self._threshold is not None:
            return self._similarity(sentence, self.sentences) >= self._threshold
        return False

    def _judge(self, sentence: str) -> list[Verdict]:
        sentence = " ".join(sentence.split())
        if not sentence:
            return []
        verdict = Verdict(sentence, self.check(sentence))
        self.verdicts.append(verdict)
        return [verdict]


class StreamGuards:
    """One ``StreamGuard`` per live request (the inference worker's): started when a request is admitted with
    its plan's sentences, fed each token's text, finished when it completes. A request without a plan is not
    guarded. Not thread-safe: the engine loop's thread owns it."""

    def __init__(self, similarity: Similarity | None = None, threshold: float | None = None,
                 started: StreamGuards | None = None) -> None:
        """``started``: the guards of the calls already streaming, kept under the mode they started with."""
        self._guards: dict[str, StreamGuard] = dict(started._guards) if started is not None else {}
        self._similarity = similarity
        self._threshold = threshold

    def start(self, request_id: str, sentences: Iterable[str]) -> None:
        self._guards[request_id] = StreamGuard(sentences, self._similarity, self._threshold)

    def started(self, request_id: str) -> bool:
        return request_id in self._guards

    def feed(self, request_id: str, text: str) -> list[Verdict]:
        guard = self._guards.get(request_id)
        return guard.feed(text) if guard is not None else []

    def finish(self, request_id: str) -> tuple[int, list[Verdict]]:
        """The request's off-protocol count over the whole stream, and the verdicts of its last sentence."""
        guard = self._guards.pop(request_id, None)
        if guard is None:
            return 0, []
        last = guard.finish()
        return guard.off_protocol, last

    def forget(self, request_id: str) -> None:
        self._guards.pop(request_id, None)
