"""Number words as values: "ninety one" -> 91, "a hundred and ten" -> 110, "one twenty" (a pulse or a pressure
read out) -> 120. Callers read vital signs and quantities aloud; decision point D needs the number. A lone
"one" is a pronoun or an article, not a reading. Pure function of the words, O(length).
"""

from __future__ import annotations

from collections.abc import Sequence

UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
HUNDRED = "hundred"


def number_spans(words: Sequence[str]) -> list[tuple[int, int, int]]:
    """(start, end, value) of each run of number words in ``words`` (lower case), end exclusive."""
    out = []
    i = 0
    while i < len(words):
        value, used = _number_at(words, i)
        if used:
            out.append((i, i + used, value))
            i += used
        else:
            i += 1
    return out


def _number_at(words: Sequence[str], i: int) -> tuple[int, int]:
    word = words[i]
    nxt = words[i + 1] if i + 1 < len(words) else ""
    if word in ("a", "one") and nxt == HUNDRED:
        has_and = list(words[i + 2:i + 3]) == ["and"]
        rest, used = _below_hundred(words, i + 2 + has_and)
        return 100 + rest, 2 + (has_and and used > 0) + used
    if word == "one" and nxt in TENS:  # "one twenty" = 120, as a pulse or pressure is read out
        rest, used = _below_hundred(words, i + 1)
        return 100 + rest, 1 + used
    value, used = _below_hundred(words, i)
    if used and value == 1 and word == "one":
        return 0, 0
    return value, used


def _below_hundred(words: Sequence[str], i: int) -> tuple[int, int]:
    if i >= len(words):
        return 0, 0
    word = words[i]
    if word in TENS:
        unit = UNITS.get(words[i + 1], 0) if i + 1 < len(words) else 0
        return (TENS[word] + unit, 2) if 0 < unit < 10 else (TENS[word], 1)
    if word in UNITS:
        return UNITS[word], 1
    return 0, 0
