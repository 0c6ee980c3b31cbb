"""Linked calls: is this call about an event another open call already reported?

Thirty callers about one collapse at a bus station are one incident, not thirty ESI-1 calls each holding LLM
capacity. A link is *proposed* (a dispatcher confirms or splits it) when two calls are close in time and place
and their words do not say they are about different things:

- **time**: received within ``max_gap_s`` of each other;
- **place**: both have coordinates within ``max_distance_m`` plus their stated uncertainties, or — without
  coordinates — the same address once case, punctuation and spacing are set aside. Where the two places cannot
  be compared (one call has no location, or only an address while the other has only coordinates: we geocode
  nothing), the words must carry the link on their own: ``min_text_similarity_without_place`` within
  ``max_gap_without_place_s``. The same complaint across a city is a coincidence, not an incident;
- **words**: the cosine of their words reaches ``min_text_similarity``. Words are Snowball stems outside spaCy's
  English stop list and the fillers of speech, each weighted by its inverse document frequency in the written
  corpus (fixtures/calls/written/): words every call has ("ambulance", "breathing", "pain") weigh little, the
  words of *this* event ("bus", "cyclist", "smoke", "escalator") a lot. Two unrelated calls from one address (a
  care home, a station) fail here. (The clinical findings and the protocol family were tried as further words
  and dropped: generic findings such as "breathing normally" and coarse families linked unrelated calls —
  docs/decisions/linked-calls.md.)

Of all open calls that qualify, the link goes to the one with the highest text similarity (then the nearest in
time). Plain Python: no Django, so the rule is tested and evaluated on its own (tests/clinical/test_incident_links.py).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from nltk.stem.snowball import SnowballStemmer
from spacy.lang.en.stop_words import STOP_WORDS

CORPUS_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "calls" / "written"
EARTH_RADIUS_M = 6_371_000.0
_STEM = SnowballStemmer("english").stem  # "collapsed", "collapse" -> "collaps": callers word one event differently
_WORD = re.compile(r"[a-z]{2,}")  # "he's" is "he" (a stop word) and a dropped "s"
# Words every emergency call uses, and the fillers of speech: shared, they say nothing about being the same event.
CALL_WORDS = frozenset({"ambulance", "help", "please", "hurry", "need", "quick", "quickly", "hello", "hi", "yes",
                        "yeah", "okay", "ok", "um", "erm", "uh", "like", "really", "think", "know", "right", "just",
                        "now", "send", "someone", "somebody", "caller", "got", "get", "say", "said", "thing", "bit",
                        "lot", "little", "sorry", "mean", "sure", "go", "going", "gone"})


@dataclass(frozen=True)
class LinkRule:
    max_gap_s: float = 15 * 60
    max_distance_m: float = 250.0
    min_text_similarity: float = 0.12  # IDF-weighted cosine
    max_gap_without_place_s: float = 10 * 60
    min_text_similarity_without_place: float = 0.2


DEFAULT_RULE = LinkRule()


@dataclass(frozen=True)
class CallForLinking:
    """What the rule reads of a call."""

    id: int
    received_s: float  # epoch seconds
    text: str
    lat: float | None = None
    lon: float | None = None
    uncertainty_m: float | None = None
    address: str = ""
    words: frozenset[str] = field(default=frozenset(), compare=False)

    def with_words(self) -> CallForLinking:
        """The call with its content words read once (the rule compares each call with many)."""
        return replace(self, words=content_words(self.text))


@lru_cache(maxsize=4096)
def content_words(text: str) -> frozenset[str]:
    """A transcript's content words, read once per process: an open call is compared with every call that
    arrives after it for up to ``max_gap_s``."""
    return frozenset(_STEM(w) for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and w not in CALL_WORDS)


@lru_cache(maxsize=1)
def word_weights() -> tuple[dict[str, float], float]:
    """Inverse document frequency of each stem over the written corpus, and the weight of a stem it never saw:
    log((1 + n) / (1 + df)) + 1, as scikit-learn's smooth IDF. Read once per process."""
    texts = [json.loads(line)["transcript"] for path in sorted(CORPUS_DIR.glob("*.jsonl"))
             for line in path.read_text().splitlines() if line.strip()]
    df = Counter(word for text in texts for word in content_words(text))
    n = len(texts)
    unseen = math.log(1 + n) + 1
    return {word: math.log((1 + n) / (1 + count)) + 1 for word, count in df.items()}, unseen


def distance_m(a: CallForLinking, b: CallForLinking) -> float:
    """Great-circle distance (haversine) between two calls with coordinates."""
    lat1, lat2 = math.radians(a.lat), math.radians(b.lat)
    dlat, dlon = lat2 - lat1, math.radians(b.lon - a.lon)
    h = math.sin(dlat / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin(dlon / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(math.sqrt(h))


def same_address(a: str, b: str) -> bool:
    def norm(s: str) -> str:
        return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())

    return bool(norm(a)) and norm(a) == norm(b)


def text_similarity(a: CallForLinking, b: CallForLinking) -> float:
    """Cosine of the two calls' IDF-weighted word sets (0 when either has no content words)."""
    if not a.words or not b.words:
        return 0.0
    weights, unseen = word_weights()

    def norm(words: frozenset[str]) -> float:
        return math.sqrt(sum(weights.get(w, unseen) ** 2 for w in words))

    shared = sum(weights.get(w, unseen) ** 2 for w in a.words & b.words)
    return shared / (norm(a.words) * norm(b.words))


def has_place(call: CallForLinking) -> bool:
    return (call.lat is not None and call.lon is not None) or bool(call.address.strip())


def close_in_place(a: CallForLinking, b: CallForLinking, rule: LinkRule) -> bool | None:
    """Whether the two calls' places are close; None when they cannot be compared."""
    if None not in (a.lat, a.lon, b.lat, b.lon):
        # a handset located to within a kilometre says little about which street it is in
        slack = min((a.uncertainty_m or 0.0) + (b.uncertainty_m or 0.0), rule.max_distance_m)
        return distance_m(a, b) <= rule.max_distance_m + slack
    if a.address.strip() and b.address.strip():
        return same_address(a.address, b.address)
    return None


def link_score(a: CallForLinking, b: CallForLinking, rule: LinkRule = DEFAULT_RULE) -> float | None:
    """The text similarity of two calls the rule links, or None when it does not."""
    gap = abs(a.received_s - b.received_s)
    if gap > rule.max_gap_s:
        return None
    close = close_in_place(a, b, rule)
    if close is False:
        return None
    similarity = text_similarity(a, b)
    if close is None:  # no place to compare: the words alone, and more of them, and one call must say where
        if not (has_place(a) or has_place(b)):
            return None
        ok = gap <= rule.max_gap_without_place_s and similarity >= rule.min_text_similarity_without_place
        return similarity if ok else None
    return similarity if similarity >= rule.min_text_similarity else None


def best_link(call: CallForLinking, open_calls: Iterable[CallForLinking], rule: LinkRule = DEFAULT_RULE) -> int | None:
    """The id of the open call ``call`` is most likely about the same event as, or None."""
    call = call if call.words else call.with_words()
    best: tuple[float, float, int] | None = None
    for other in open_calls:
        if other.id == call.id:
            continue
        score = link_score(call, other if other.words else other.with_words(), rule)
        if score is not None:
            key = (score, -abs(call.received_s - other.received_s), other.id)
            best = key if best is None or key > best else best
    return best[2] if best else None
