"""The catalogue's phrase language, compiled to spaCy ``Matcher`` token patterns.

A clinical lead writes phrases in a small language (fixtures/clinical/README.md):

    chest pain              the words, adjacent, in this order
    breath*                 a word starting with "breath" (breath, breathing, breathless)
    (blue|grey|purple)      one of the alternatives; an alternative may be several words
    [very] pale             an optional word or words
    can't ... breathe       up to three other words between (never across punctuation or a denial)
    {his} chest             a macro: {his} = his/her/their/my/…, {he} = he/she/they/i/…,
                            {is} = is/are/was/'s/…, {not} = not/never/no, {n} = a number

Each literal word is cut by the same spaCy tokenizer that cuts the calls and compared on the token's NORM, so
"can't" in a phrase is the two tokens can + not, and meets "cant", "can't" and "cannot" alike. A wildcard word
and a number are compared on the token's LEMMA, which the reader sets to the longest catalogue stem the word
starts with, or to ``NUMBER_LEMMA`` (no lemmatizer runs): every predicate is then an exact or set test, which
spaCy's matcher checks by hash, where a regular expression per token and pattern cost it tens of milliseconds a
call. A phrase becomes one or more token patterns (alternatives of different lengths and multi-word optional
parts expand into several); ``resolve_stems`` turns each stem test into the set of stems that extend it.
Pure functions of the phrase and the tokenizer.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

Token = dict[str, object]
Pattern = list[Token]
Tokenizer = Callable[[str], list[str]]  # a word -> the NORMs of its tokens

# A gap never takes in punctuation or a denial: "he's not blue" is no case of "he ... blue".
NEGATIONS = ("not", "no", "never", "nothing", "without", "none", "nor")
GAP: Token = {"IS_PUNCT": False, "IS_SPACE": False, "NORM": {"NOT_IN": list(NEGATIONS)}, "OP": "{0,3}"}
NUMBER_LEMMA = "#number"
MACROS: dict[str, tuple[str, ...]] = {
    "his": ("his", "her", "their", "my", "your", "the", "its", "our", "this", "that"),
    "he": ("he", "she", "they", "i", "it", "you", "we", "baby", "patient"),
    "is": ("is", "are", "was", "were", "am", "be", "been", "being", "'s", "keeps", "kept"),
    "not": ("not", "never", "no"),
}
MAX_PATTERNS_PER_PHRASE = 256  # a phrase that expands further is refused: write it as two phrases
_PHRASE_TOKEN = re.compile(r"\(|\)|\[|\]|\||\.\.\.|\{[a-z]+\}|[^\s()\[\]|]+")
_WORD = re.compile(r"^[a-z0-9'/%.]+\*?$")


class PhraseError(ValueError):
    """A phrase that does not parse; the message names it."""


# The parsed phrase: a sequence of elements, each a set of alternative token sequences.
@dataclass(frozen=True)
class _Choice:
    alternatives: tuple[tuple[Token, ...], ...]  # each alternative: the tokens it stands for


def compile_phrase(phrase: str, tokenize: Tokenizer) -> list[Pattern]:
    """Every token pattern ``phrase`` stands for (at most ``MAX_PATTERNS_PER_PHRASE``)."""
    parts = _PHRASE_TOKEN.findall(phrase.strip().lower().replace("-", " "))
    if not parts:
        raise PhraseError(f"empty phrase {phrase!r}")
    elements, end = _sequence(parts, 0, phrase, tokenize)
    if end != len(parts):
        raise PhraseError(f"unbalanced brackets in {phrase!r}")
    if not elements or all(e is None for e in elements):
        raise PhraseError(f"phrase {phrase!r} has no word")
    count = 1
    for element in elements:
        count *= len(element.alternatives) if element is not None else 1
    if count > MAX_PATTERNS_PER_PHRASE:
        raise PhraseError(f"phrase {phrase!r} expands to {count} patterns (at most {MAX_PATTERNS_PER_PHRASE})")
    patterns = []
    for combination in itertools.product(*[e.alternatives if e is not None else ((GAP,),) for e in elements]):
        pattern = _trim_gaps([dict(token) for tokens in combination for token in tokens])
        if pattern and pattern not in patterns:
            patterns.append(pattern)
    return patterns


def _trim_gaps(pattern: Pattern) -> Pattern:
    """A gap only joins words: at either end of a pattern it would widen the match for nothing."""
    while pattern and pattern[0] == GAP:
        pattern.pop(0)
    while pattern and pattern[-1] == GAP:
        pattern.pop()
    return pattern


def _sequence(parts: list[str], i: int, phrase: str, tokenize: Tokenizer) -> tuple[list[_Choice | None], int]:
    """Elements until a closing bracket or "|"; None stands for a gap."""
    elements: list[_Choice | None] = []
    while i < len(parts) and parts[i] not in (")", "]", "|"):
        part = parts[i]
        if part == "(":
            alternatives: list[tuple[Token, ...]] = []
            i += 1
            while True:
                inner, i = _sequence(parts, i, phrase, tokenize)
                if None in inner:
                    raise PhraseError(f"a gap (...) inside brackets in {phrase!r}")
                alternatives += _expand(inner)
                if i >= len(parts):
                    raise PhraseError(f"unclosed ( in {phrase!r}")
                i += 1
                if parts[i - 1] == ")":
                    break
            elements.append(_Choice(_merge_single_tokens(alternatives)))
        elif part == "[":
            inner, i = _sequence(parts, i + 1, phrase, tokenize)
            if i >= len(parts) or parts[i] != "]":
                raise PhraseError(f"unclosed [ in {phrase!r}")
            if None in inner:
                raise PhraseError(f"a gap (...) inside brackets in {phrase!r}")
            i += 1
            elements.append(_Choice(((),) + tuple(_expand(inner))))
        elif part == "...":
            elements.append(None)
            i += 1
        else:
            elements.append(_Choice((_word(part, phrase, tokenize),)))
            i += 1
    return elements, i


def _expand(elements: list[_Choice | None]) -> list[tuple[Token, ...]]:
    return [tuple(t for tokens in combo for t in tokens) for combo in itertools.product(
        *[e.alternatives for e in elements if e is not None])]


def _merge_single_tokens(alternatives: list[tuple[Token, ...]]) -> tuple[tuple[Token, ...], ...]:
    """Alternatives that are one plain token each become one token with a set of values per attribute (one
    pattern for the words, one for the stems, not one per alternative)."""
    merged: dict[str, list[str]] = {}
    rest = []
    for alternative in alternatives:
        if len(alternative) == 1 and len(alternative[0]) == 1:
            (attribute, value), = alternative[0].items()
            values = value["IN"] if isinstance(value, dict) else [value]  # type: ignore[index]
            merged.setdefault(attribute, []).extend(values)  # type: ignore[arg-type]
        else:
            rest.append(alternative)
    singles: list[tuple[Token, ...]] = [
        ({a: {"IN": sorted(set(v))}} if len(set(v)) > 1 else {a: v[0]},) for a, v in merged.items()]
    return (*singles, *rest)


def _word(part: str, phrase: str, tokenize: Tokenizer) -> tuple[Token, ...]:
    if part.startswith("{"):
        name = part[1:-1]
        if name == "n":
            return ({"LEMMA": NUMBER_LEMMA},)
        if name not in MACROS:
            raise PhraseError(f"unknown macro {part} in {phrase!r} (known: n, {', '.join(sorted(MACROS))})")
        return ({"NORM": {"IN": list(MACROS[name])}},)
    if not _WORD.match(part):
        raise PhraseError(f"{part!r} in {phrase!r} is not a word (letters, digits, ' / % . and a final *)")
    if part.endswith("*"):
        stem = part[:-1]
        if not stem:
            raise PhraseError(f"a bare * in {phrase!r}")
        return ({"LEMMA": stem},)
    norms = tokenize(part)
    return tuple({"NORM": norm} for norm in norms)


def stems(patterns: list[Pattern]) -> set[str]:
    """The wildcard stems the patterns test."""
    out: set[str] = set()
    for pattern in patterns:
        for token in pattern:
            value = token.get("LEMMA")
            values = value["IN"] if isinstance(value, dict) else [value] if value else []  # type: ignore[index]
            out |= {v for v in values if v != NUMBER_LEMMA}  # type: ignore[union-attr]
    return out


def resolve_stems(pattern: Pattern, all_stems: set[str]) -> Pattern:
    """Each stem test becomes the set of stems that extend it: the reader gives a word its longest stem, so
    "breathlessness" has the stem "breathless" and must still meet "breath*"."""
    out = []
    for token in pattern:
        value = token.get("LEMMA")
        if value is None:
            out.append(token)
            continue
        values = value["IN"] if isinstance(value, dict) else [value]  # type: ignore[index]
        extended = sorted({t for v in values for t in all_stems if t.startswith(v)} | set(values))  # type: ignore[union-attr]
        out.append({**token, "LEMMA": {"IN": extended} if len(extended) > 1 else extended[0]})
    return out


def phrase_words(phrase: str) -> list[str]:
    """The literal words of a phrase (wildcard stems included), for the spelling corrector's vocabulary."""
    return [w.strip("*") for w in re.findall(r"[a-z'*]+", phrase.lower()) if w.strip("*'")]
