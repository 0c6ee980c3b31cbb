"""Spelling correction for non-words only (symspellpy).

A word is corrected only when it is not an English word — symspellpy's frequency dictionary of 82,765 words,
a word list built from Google Books n-grams and SCOWL, not an encoder's sub-word vocabulary — and not one of
the catalogue's own words; and only into a catalogue word, when exactly one is within one edit (two for a word
of 10+ letters). "stubbed" is English and stays "stubbed"; "bleding" becomes "bleeding"; "cpr", "gcs" and
other shorthand are too short to correct. Findings that rest on a corrected word are marked, and decision
points A and B never rest on them alone (``algorithm``).
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterable
from functools import lru_cache

from symspellpy import SymSpell, Verbosity

MIN_LENGTH = 5  # shorter words are shorthand or too ambiguous to correct
LONG_WORD = 10  # from this length on, two edits are allowed
ENGLISH_DICTIONARY = "frequency_dictionary_en_82_765.txt"


@lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """symspellpy's English frequency dictionary, as a set of words (the counts are not needed here)."""
    path = importlib.resources.files("symspellpy") / ENGLISH_DICTIONARY
    with path.open(encoding="utf-8") as handle:
        return frozenset(line.split(" ", 1)[0] for line in handle if line.strip())


class SpellingCorrector:
    """Corrects non-words into the catalogue's vocabulary. O(1) per word after an O(vocabulary) build."""

    def __init__(self, vocabulary: Iterable[str], keep: Iterable[str] = ()) -> None:
        self.vocabulary = frozenset(w for w in vocabulary if w.isalpha() and len(w) >= MIN_LENGTH - 1)
        self._keep = frozenset(keep) | self.vocabulary
        self._english = english_words()
        self._symspell = SymSpell(max_dictionary_edit_distance=2, prefix_length=7)
        for word in self.vocabulary:
            self._symspell.create_dictionary_entry(word, 1)
        self.correct = lru_cache(maxsize=65536)(self._correct)

    def _correct(self, word: str) -> str | None:
        """The catalogue word ``word`` is a misspelling of, or None to leave it as it is."""
        if len(word) < MIN_LENGTH or not word.isalpha() or word in self._keep or word in self._english:
            return None
        distance = 2 if len(word) >= LONG_WORD else 1
        found = self._symspell.lookup(word, Verbosity.CLOSEST, max_edit_distance=distance,
                                      transfer_casing=False)
        candidates = {s.term for s in found}
        return candidates.pop() if len(candidates) == 1 else None
