"""Catalogue phrases, compiled to regular expressions over the normalised token string (``text.Tokens``).

The phrase language is small enough for a clinical lead to write (fixtures/clinical/README.md):

    chest pain              the words, adjacent, in this order
    breath*                 a word starting with "breath" (breath, breathing, breathless)
    (blue|grey|purple)      one of the alternatives; an alternative may be several words
    [very] pale             an optional word or words
    can't ... breathe       up to three other words between (never across a clause or sentence break)
    {his} chest             a macro: {his} = his/her/their/my/your/the/its/our, {he} = he/she/they/i/...,
                            {is} = is/are/was/am/'s forms, {not} = not/n't forms/never/no, {n} = a number

Compilation is done once per catalogue; matching a call is one ``finditer`` per concept: O(concepts * length).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .text import Tokens

WORD = r"[^ .!?;:,\n][^ ]*"  # a word token: anything but a break, up to the next space
GAP = rf"(?: {WORD}){{0,3}}"
MACROS = {
    "his": "(?:his|her|their|my|your|the|its|our|this|that)",
    "he": "(?:he|she|they|i|it|you|we|he's|she's|they're|i'm|it's|you're|we're|baby|patient)",
    "is": "(?:is|are|was|were|am|be|been|being|he's|she's|they're|i'm|it's|you're|we're|that's|there's|keeps|kept)",
    "n": r"\d+(?:\.\d+)?",
    "not": "(?:not|never|no|isn't|aren't|wasn't|weren't|don't|doesn't|didn't|can't|couldn't|won't|wouldn't|"
    "hasn't|haven't|hadn't|ain't)",
}
_PHRASE_TOKEN = re.compile(r"\(|\)|\[|\]|\||\.\.\.|\{[a-z]+\}|[^\s()\[\]|]+")


class PhraseError(ValueError):
    """A phrase that does not parse; the message names it."""


def compile_phrase(phrase: str) -> str:
    """The regex source for one phrase, anchored on token boundaries."""
    tokens = _PHRASE_TOKEN.findall(phrase.strip().lower().replace("-", " "))  # text splits hyphenated words
    if not tokens:
        raise PhraseError(f"empty phrase {phrase!r}")
    body, rest = _sequence(tokens, 0, phrase)
    if rest != len(tokens):
        raise PhraseError(f"unbalanced brackets in {phrase!r}")
    return rf"(?<![^ ]){body}(?![^ ])"


def _sequence(tokens: list[str], i: int, phrase: str) -> tuple[str, int]:
    """Parse words until a closing bracket or "|"; returns the regex and where it stopped."""
    parts: list[str] = []  # each item is the regex of one element, joined by single spaces
    optional: list[bool] = []
    while i < len(tokens) and tokens[i] not in (")", "]", "|"):
        token = tokens[i]
        if token == "(":
            alternatives = []
            i += 1
            while True:
                alt, i = _sequence(tokens, i, phrase)
                alternatives.append(alt)
                if i >= len(tokens):
                    raise PhraseError(f"unclosed ( in {phrase!r}")
                if tokens[i] == ")":
                    i += 1
                    break
                i += 1  # "|"
            parts.append("(?:" + "|".join(alternatives) + ")")
            optional.append(False)
        elif token == "[":
            inner, i = _sequence(tokens, i + 1, phrase)
            if i >= len(tokens) or tokens[i] != "]":
                raise PhraseError(f"unclosed [ in {phrase!r}")
            i += 1
            parts.append(inner)
            optional.append(True)
        elif token == "...":
            parts.append(GAP)
            optional.append(None)  # type: ignore[arg-type]  # a gap glues itself to its neighbours
            i += 1
        else:
            parts.append(_word(token, phrase))
            optional.append(False)
            i += 1
    return _join(parts, optional), i


def _join(parts: list[str], optional: list[bool | None]) -> str:
    """Words are separated by one space; an optional element carries its own leading space."""
    out = ""
    for part, opt in zip(parts, optional, strict=True):
        if opt is None:  # gap: " word" repeated 0-3 times, always after something
            out += part
        elif opt:
            out += f"(?: {part})?" if out else f"(?:{part} )?"
        else:
            out += f" {part}" if out and not out.endswith(" )?") else part
    return out


def _word(token: str, phrase: str) -> str:
    if token.startswith("{"):
        name = token[1:-1]
        if name not in MACROS:
            raise PhraseError(f"unknown macro {token} in {phrase!r} (known: {', '.join(sorted(MACROS))})")
        return MACROS[name]
    if token.endswith("*"):
        return re.escape(token[:-1]) + r"[^ ]*"
    return re.escape(token)


@dataclass(frozen=True)
class Mention:
    """One place in a call where a concept's phrase matched: token indices [start, end)."""

    concept: str
    start: int
    end: int


Anchor = tuple[frozenset[str], frozenset[str]]  # words one of which must be in the call, and word prefixes


def phrase_anchor(phrase: str) -> Anchor | None:
    """The words of a phrase's first required element: a call with none of them cannot match the phrase, so
    its regular expression need not run. None when the phrase has no such element (it starts with a macro,
    a gap or optional words only)."""
    tokens = _PHRASE_TOKEN.findall(phrase.strip().lower().replace("-", " "))
    words = _first_words(tokens, 0)
    if not words:
        return None
    exact = frozenset(w for w in words if not w.endswith("*"))
    prefixes = frozenset(w[:-1] for w in words if w.endswith("*"))
    return exact, prefixes


def _first_words(tokens: list[str], i: int) -> list[str] | None:
    """Literal words that can open the sequence starting at ``i`` (None: not knowable)."""
    if i >= len(tokens) or tokens[i] in (")", "]", "|", "...", "[") or tokens[i].startswith("{"):
        return None
    if tokens[i] != "(":
        return [tokens[i]]
    words, depth, start = [], 0, i + 1
    for j in range(i + 1, len(tokens)):
        if tokens[j] in ("(", "["):
            depth += 1
        elif tokens[j] in (")", "]") and depth:
            depth -= 1
        elif depth == 0 and tokens[j] in ("|", ")"):
            first = _first_words(tokens, start)
            if first is None:
                return None
            words += first
            start = j + 1
            if tokens[j] == ")":
                return words
    return None


class Lexicon:
    """Every concept's phrases as one compiled alternation per concept, run only on calls that contain one of
    its phrases' anchor words (most calls mention a few dozen of the catalogue's hundreds of concepts)."""

    def __init__(self, phrases: dict[str, Iterable[str]]) -> None:
        self.patterns: dict[str, re.Pattern[str]] = {}
        self.anchors: dict[str, list[Anchor] | None] = {}
        for concept, items in phrases.items():
            items = list(items)
            sources = [compile_phrase(p) for p in items]
            if sources:
                self.patterns[concept] = re.compile("|".join(sources))
                anchors = [phrase_anchor(p) for p in items]
                self.anchors[concept] = None if any(a is None for a in anchors) else anchors  # type: ignore[assignment]
        self.vocabulary = tuple(sorted({
            w.strip("*") for items in phrases.values() for p in items for w in re.findall(r"[a-z'*]+", p.lower())
        }))

    def mentions(self, tokens: Tokens, concepts: Iterable[str] | None = None) -> Iterator[Mention]:
        """Every match of every concept's phrases (of ``concepts`` only, when given)."""
        present = set(tokens.words)
        starts = {w[:n] for w in present for n in range(1, len(w) + 1)}  # every prefix of every word
        wanted = self.patterns if concepts is None else {c: self.patterns[c] for c in concepts if c in self.patterns}
        for concept, pattern in wanted.items():
            anchors = self.anchors[concept]
            if anchors is not None and not any(
                not exact.isdisjoint(present) or not prefixes.isdisjoint(starts) for exact, prefixes in anchors
            ):
                continue
            for match in pattern.finditer(tokens.text):
                start = tokens.index_at(match.start())
                end = tokens.index_at(max(match.start(), match.end() - 1)) + 1
                yield Mention(concept, start, end)
