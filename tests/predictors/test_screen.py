"""The lexical pre-screen that orders the triage backlog, on the held-out TEST split of the corpus."""

import json
from pathlib import Path

from inference.predictors.screen import screen_score

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "calls" / "calls.jsonl"


def _auc(positives: list[int], negatives: list[int]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def test_the_screen_ranks_unseen_esi_1_and_2_calls_above_the_rest():
    records = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    test = [r for r in records if r["split"] == "test"]
    scores = [screen_score(r["transcript"]) for r in test]
    esi1 = [s for s, r in zip(scores, test, strict=True) if r["esi"] == 1]
    rest = [s for s, r in zip(scores, test, strict=True) if r["esi"] > 1]
    urgent = [s for s, r in zip(scores, test, strict=True) if r["esi"] <= 2]
    other = [s for s, r in zip(scores, test, strict=True) if r["esi"] > 2]
    assert _auc(esi1, rest) >= 0.9  # measured 0.96 when written
    assert _auc(urgent, other) >= 0.85  # measured 0.91


def test_an_arrest_outscores_a_sprained_ankle_and_typos_still_count():
    ankle = screen_score("I twisted my ankle yesterday, it's a bit swollen")
    assert screen_score("my dad collapsed, hes not breathing and his lips are going blue") > ankle
    assert screen_score("shes unconcsious and isnae breathin") > ankle
