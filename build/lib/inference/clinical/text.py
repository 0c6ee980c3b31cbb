"""Caller speech to a normalised token stream: lower case, one apostrophe, contractions and dialect spelled
one way, number words as digits, misspelt clinical words corrected, and call-taker questions answered
"yes"/"no" turned into the statement they confirm or deny.

Matching (``lexicon``) and negation scopes (``context``) both work on the token list this module returns, so
a phrase in the catalogue is written once, in plain spelling, and still meets "cant breath", "he isnae
breathin" and "Is he breathing? - No." Every function here is a pure function of its input: O(length).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

TOKEN = re.compile(r"\d+(?:\.\d+)?|[a-z]+\d*(?:'[a-z]+)*|[.!?;:,\n]|%|/")  # a hyphen separates words
BREAKS = frozenset(".!?;\n")  # sentence ends: no scope or phrase crosses them
CLAUSE_BREAKS = BREAKS | {",", ":"}

# Spellings callers type or a speech recogniser writes, to the one spelling the catalogue uses.
SPELLINGS: dict[str, str] = {
    "cant": "can't", "cannot": "can't", "cannae": "can't", "canna": "can't", "cudnt": "couldn't",
    "dont": "don't", "dinnae": "don't", "dunno": "don't know", "doesnt": "doesn't", "doesnae": "doesn't",
    "didnt": "didn't", "didnae": "didn't", "wont": "won't", "willnae": "won't", "isnt": "isn't",
    "isnae": "isn't", "aint": "isn't", "ain't": "isn't", "wasnt": "wasn't", "wasnae": "wasn't",
    "arent": "aren't", "werent": "weren't", "couldnt": "couldn't", "couldnae": "couldn't",
    "wouldnt": "wouldn't", "shouldnt": "shouldn't", "hasnt": "hasn't", "havent": "haven't",
    "hadnt": "hadn't", "hes": "he's", "shes": "she's", "im": "i'm", "ive": "i've", "theres": "there's",
    "thats": "that's", "its": "it's", "whats": "what's", "theyre": "they're", "youre": "you're",
    "ma": "my", "tae": "to", "wis": "was", "oot": "out", "nae": "no", "naw": "no", "nah": "no", "nope": "no", "yeah": "yes", "yep": "yes", "yup": "yes", "aye": "yes",
    "ya": "yes", "yea": "yes", "ok": "okay", "pls": "please", "plz": "please", "u": "you",
    "ur": "your", "b4": "before", "bc": "because", "cos": "because", "coz": "because",
    "wat": "what", "breathin": "breathing", "bleedin": "bleeding", "throwin": "throwing",
    "shakin": "shaking", "fittin": "fitting", "movin": "moving", "talkin": "talking", "respondin": "responding",
    "gaspin": "gasping", "chokin": "choking", "vomitting": "vomiting", "vomitted": "vomited",
    "puking": "vomiting", "puked": "vomited", "puke": "vomit", "spewing": "vomiting", "hurled": "vomited",
    "weeing": "urinating",
    "tummy": "stomach", "belly": "stomach", "abdomen": "stomach", "abdo": "stomach", "gut": "stomach",
    "oxygen's": "oxygen is", "o2": "oxygen", "spo2": "oxygen",
    "tylenol": "paracetamol", "acetaminophen": "paracetamol",
    "mins": "minutes", "min": "minutes", "yrs": "years", "yr": "years",
    "yo": "years old", "y/o": "years old", "wks": "weeks", "wk": "weeks", "mths": "months", "mos": "months",
    "gray": "grey", "colour": "color", "coloured": "colored",
    "unconcious": "unconscious", "unconsious": "unconscious", "unconscience": "unconscious",
    "concious": "conscious", "consious": "conscious", "diabetis": "diabetes",
    "seizuring": "seizing", "siezure": "seizure", "seisure": "seizure", "ambulence": "ambulance",
    "amberlance": "ambulance", "hart": "heart", "brething": "breathing", "breating": "breathing",
}
NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
# Said, not typed: "a hundred and ten", "one twenty" (of a pulse), "ninety one".
HUNDRED = "hundred"

YES = frozenset({"yes", "yeah", "yep", "yup", "aye", "correct", "definitely", "uh-huh"})
NO = frozenset({"no", "nope", "nah", "naw", "not", "negative"})
AUXILIARIES = frozenset({
    "is", "are", "was", "were", "does", "do", "did", "has", "have", "had", "can", "could", "will", "would",
    "any", "there", "is there", "are there",
})
SUBJECTS = frozenset({"he", "she", "they", "it", "you", "the", "patient", "your", "his", "her", "their", "baby"})
SPEAKER_TAG = re.compile(
    r"\b(call[ -]?taker|dispatcher|operator|caller|ct|c|d|911|999|000|111)\s*:", re.IGNORECASE
)


@dataclass(frozen=True)
class Tokens:
    """The normalised words and punctuation of a call, and the single-spaced string they join into."""

    words: tuple[str, ...]
    text: str  # " ".join(words): what catalogue phrases are matched against
    starts: tuple[int, ...]  # character offset of each word in ``text``

    def index_at(self, offset: int) -> int:
        """The index of the word that starts at or contains character ``offset`` of ``text``. O(log n)."""
        from bisect import bisect_right

        return max(0, bisect_right(self.starts, offset) - 1)


def tokenize(transcript: str, vocabulary: Iterable[str] = (), known: frozenset[str] = frozenset()) -> Tokens:
    """Normalise ``transcript`` (see the module docstring). ``vocabulary``: the catalogue's own words, the
    targets of spelling correction (a sorted tuple is used as it is: the corrector is cached per vocabulary);
    ``known``: real words that are never corrected."""
    raw = SPEAKER_TAG.sub(" . ", transcript.lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'"))
    words: list[str] = []
    for word in TOKEN.findall(raw):
        words.extend(SPELLINGS.get(word, word).split())
    words = _numbers(words)
    if vocabulary and not isinstance(vocabulary, tuple):
        vocabulary = tuple(sorted(set(vocabulary)))
    correct = _corrector(vocabulary, known) if vocabulary else None
    if correct is not None:
        words = [correct(w) for w in words]
    words = _answered_questions(words)
    return _joined(words)


def _joined(words: list[str]) -> Tokens:
    starts, offset = [], 0
    for word in words:
        starts.append(offset)
        offset += len(word) + 1
    return Tokens(tuple(words), " ".join(words), tuple(starts))


def _numbers(words: list[str]) -> list[str]:
    """Number words to digits: "ninety one" -> 91, "a hundred and ten" -> 110, "one twenty" after a vital's
    name stays as said ("one twenty" -> 120). Digits are left alone."""
    out: list[str] = []
    i = 0
    while i < len(words):
        value, used = _number_at(words, i)
        if used:
            out.append(str(value))
            i += used
        else:
            out.append(words[i])
            i += 1
    return out


def _number_at(words: list[str], i: int) -> tuple[int, int]:
    word = words[i]
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if word in ("a", "one") and nxt == HUNDRED:
        rest, used = _below_hundred(words, i + 2 + (words[i + 2:i + 3] == ["and"]))
        return 100 + rest, 2 + (words[i + 2:i + 3] == ["and"] and used > 0) + used
    if word == "one" and nxt in TENS:  # "one twenty" = 120, as a pulse or pressure is read out
        rest, used = _below_hundred(words, i + 1)
        return 100 + rest, 1 + used
    value, used = _below_hundred(words, i)
    if used and value == 1 and word == "one":
        return 0, 0  # "one" is usually a pronoun or an article, not a reading
    return value, used


def _below_hundred(words: list[str], i: int) -> tuple[int, int]:
    if i >= len(words):
        return 0, 0
    word = words[i]
    if word in TENS:
        unit = NUMBER_WORDS.get(words[i + 1], 0) if i + 1 < len(words) else 0
        return (TENS[word] + unit, 2) if 0 < unit < 10 else (TENS[word], 1)
    if word in NUMBER_WORDS:
        return NUMBER_WORDS[word], 1
    return 0, 0


def _answered_questions(words: list[str]) -> list[str]:
    """A call-taker's yes/no question and the caller's answer become the statement they make:
    "is he breathing ? no" -> "is he breathing ? . not breathing . no". The question itself stays (its
    clause is a question, which ``context`` never counts as a finding)."""
    out: list[str] = []
    clause: list[str] = []
    for i, word in enumerate(words):
        out.append(word)
        if word == "?":
            answer = _answer_after(words, i + 1)
            predicate = _predicate(clause)
            if answer is not None and predicate:
                out.extend(["."] + (["not"] if answer is False else []) + predicate + ["."])
            clause = []
        elif word in CLAUSE_BREAKS:
            clause = []
        else:
            clause.append(word)
    return out


def _answer_after(words: list[str], i: int) -> bool | None:
    while i < len(words) and words[i] in CLAUSE_BREAKS:
        i += 1
    if i >= len(words):
        return None
    if words[i] in YES:
        return True
    if words[i] in NO:
        return False
    return None


def _predicate(question: list[str]) -> list[str]:
    """ "is he breathing" -> ["breathing"]; "does she have any chest pain" -> ["chest", "pain"]."""
    words = list(question)
    while words and (words[0] in AUXILIARIES or words[0] in SUBJECTS or words[0] in ("and", "so", "okay")):
        words.pop(0)
    if words[:1] == ["have"]:
        words.pop(0)
    while words and words[0] in ("any", "a", "an"):
        words.pop(0)
    return words[:8]


@lru_cache(maxsize=4)
def _corrector(vocabulary: tuple[str, ...], known: frozenset[str]):  # noqa: ANN202 - a closure
    """A word that is neither a real word (``known``) nor in ``vocabulary`` is replaced by the one vocabulary
    word within one edit (two for words of 10+ letters), if exactly one is; otherwise it is kept."""
    by_key: dict[tuple[int, str], list[str]] = {}
    for word in vocabulary:
        if len(word) >= 5 and word.isalpha():
            by_key.setdefault((len(word), word[0]), []).append(word)
    vocab = frozenset(vocabulary)

    @lru_cache(maxsize=65536)
    def correct(word: str) -> str:
        if len(word) < 5 or not word.isalpha() or word in vocab or word in known:
            return word
        limit = 2 if len(word) >= 10 else 1
        found = {
            candidate
            for length in range(len(word) - limit, len(word) + limit + 1)
            for candidate in by_key.get((length, word[0]), ())
            if _within(word, candidate, limit)
        }
        return found.pop() if len(found) == 1 else word

    return correct


def _within(a: str, b: str, limit: int) -> bool:
    """Damerau-Levenshtein distance of ``a`` and ``b`` is at most ``limit`` (banded, O(len * limit))."""
    if abs(len(a) - len(b)) > limit:
        return False
    previous2: list[int] | None = None
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = ca != cb
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if previous2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > limit:
            return False
        previous2, previous = previous, current
    return previous[-1] <= limit


def known_words(vocab_lines: Iterable[str]) -> frozenset[str]:
    """Whole English words of a WordPiece vocabulary (no ``##`` pieces, letters only)."""
    return frozenset(w.strip() for w in vocab_lines if w.strip().isalpha())

