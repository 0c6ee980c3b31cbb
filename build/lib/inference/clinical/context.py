"""ConText (Harkema et al., 2009; medspaCy's ``context_rules.json``): whether each mention of a concept is
asserted, denied, uncertain, in the past, resolved, hypothetical, about someone else, or only asked about.

The cues are data (fixtures/clinical/context.yaml): a phrase, its category and the direction of its scope.
A forward cue ("no", "denies", "I don't think") governs the words after it, a backward cue ("ruled out",
"two years ago", "has stopped") the words before it, up to a terminator ("but", "although"), a clause or
sentence break, or a word limit. A cue inside a mention is part of the mention ("not breathing" is a
finding, not a denial of breathing) and governs nothing. O(mentions * cues) per call, both small.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .lexicon import Lexicon, Mention
from .text import CLAUSE_BREAKS, Tokens

# What a mention can be. The first two count as the finding being there now.
PRESENT, POSSIBLE = "present", "possible"
NEGATED, RESOLVED, HISTORICAL = "negated", "resolved", "historical"
HYPOTHETICAL, OTHER_PERSON, QUESTION = "hypothetical", "other_person", "question"
CURRENT = frozenset({PRESENT, POSSIBLE})
# When cues of several categories reach one mention, the first of these wins.
PRECEDENCE = (NEGATED, OTHER_PERSON, HYPOTHETICAL, HISTORICAL, RESOLVED, POSSIBLE)
CATEGORIES = frozenset(PRECEDENCE)
DIRECTIONS = frozenset({"forward", "backward", "both"})


@dataclass(frozen=True)
class Cue:
    phrase: str
    category: str
    direction: str
    uncertain: bool = False  # "I don't think": a denial the caller is unsure of
    window: int = 6


@dataclass(frozen=True)
class Assertion:
    """A mention with its status; ``uncertain`` marks a hedged denial or assertion."""

    mention: Mention
    status: str
    uncertain: bool = False


class ContextRules:
    def __init__(self, cues: Sequence[Cue], terminators: Iterable[str], pseudo: Iterable[str]) -> None:
        self.cues = list(cues)
        self._cues = Lexicon({str(i): [c.phrase] for i, c in enumerate(self.cues)})
        self._terminators = Lexicon({"terminator": list(terminators)})
        self._pseudo = Lexicon({"pseudo": list(pseudo)})

    def assert_all(self, tokens: Tokens, mentions: Sequence[Mention]) -> list[Assertion]:
        pseudo = [(m.start, m.end) for m in self._pseudo.mentions(tokens)]
        cues = [
            (self.cues[int(m.concept)], m) for m in self._cues.mentions(tokens)
            if not any(s <= m.start and m.end <= e for s, e in pseudo)
        ]
        stops = {i for m in self._terminators.mentions(tokens) for i in range(m.start, m.end)}
        questions = _question_spans(tokens.words)
        return [self._assert(tokens.words, m, cues, stops, questions) for m in mentions]

    def _assert(
        self,
        words: Sequence[str],
        mention: Mention,
        cues: list[tuple[Cue, Mention]],
        stops: set[int],
        questions: list[tuple[int, int]],
    ) -> Assertion:
        if any(s <= mention.start < e for s, e in questions):
            return Assertion(mention, QUESTION)
        found: list[Cue] = []
        for cue, at in cues:
            if at.end > mention.start and at.start < mention.end:
                continue  # the cue is part of the mention's own phrase
            if cue.direction in ("forward", "both") and at.end <= mention.start:
                if _reaches(words, at.end, mention.start, stops, cue.window):
                    found.append(cue)
            elif cue.direction in ("backward", "both") and at.start >= mention.end:
                if _reaches(words, mention.end, at.start, stops, cue.window):
                    found.append(cue)
        if not found:
            return Assertion(mention, PRESENT)
        winner = min(found, key=lambda c: PRECEDENCE.index(c.category))
        uncertain = any(c.uncertain for c in found if c.category == winner.category) or any(
            c.category == POSSIBLE for c in found
        )
        return Assertion(mention, winner.category, uncertain)


def _reaches(words: Sequence[str], start: int, end: int, stops: set[int], window: int) -> bool:
    """No clause break, terminator or more than ``window`` words between positions ``start`` and ``end``."""
    if end - start > window:
        return False
    return not any(words[i] in CLAUSE_BREAKS or i in stops for i in range(start, end))


def _question_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each clause that ends in a question mark."""
    spans, clause_start = [], 0
    for i, word in enumerate(words):
        if word == "?":
            spans.append((clause_start, i))
            clause_start = i + 1
        elif word in CLAUSE_BREAKS:
            clause_start = i + 1
    return spans
