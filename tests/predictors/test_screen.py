"""The pre-screen that orders the triage backlog, from the catalogue, on the development set (written
independently of the training data)."""

import json
from pathlib import Path

from judgment.predictors.screen import screen_score

DEVELOPMENT = Path(__file__).resolve().parents[2] / "fixtures" / "evaluation" / "development"


def _auc(positives: list[int], negatives: list[int]) -> float:
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def test_the_screen_ranks_esi_1_and_2_calls_above_the_rest():
    records = [json.loads(line) for f in sorted(DEVELOPMENT.glob("*.jsonl")) for line in f.read_text().splitlines()
               if line.strip()]
    scores = [screen_score(r["transcript"]) for r in records]
    esi1 = [s for s, r in zip(scores, records, strict=True) if r["esi"] == 1]
    rest = [s for s, r in zip(scores, records, strict=True) if r["esi"] > 1]
    urgent = [s for s, r in zip(scores, records, strict=True) if r["esi"] <= 2]
    other = [s for s, r in zip(scores, records, strict=True) if r["esi"] > 2]
    assert _auc(esi1, rest) >= 0.85  # measured 0.90 when written
    assert _auc(urgent, other) >= 0.75  # measured 0.79


def test_an_arrest_outscores_a_sprained_ankle_and_typos_still_count():
    ankle = screen_score("I twisted my ankle yesterday, it's a bit swollen")
    assert screen_score("my dad collapsed, hes not breathing and his lips are going blue") > ankle
    assert screen_score("shes unconsious and isnae breathin") > ankle
