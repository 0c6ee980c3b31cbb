"""The written corpora: the ESI training corpus and the two evaluation sets, written by different authors."""

import json
from collections import Counter
from pathlib import Path

import pytest

from judgment.clinical import load_catalogue

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"id", "transcript", "esi", "decision_point", "protocol", "chief_complaint", "caller", "rationale"}
GUIDE = REPO / "docs" / "esi-labelling-guide.md"


def _load(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def protocols() -> set[str]:
    return {line.split("`")[1] for line in GUIDE.read_text().splitlines() if line.startswith("| `")}


@pytest.mark.parametrize(("folder", "minimum"), [("fixtures/calls/written", 4500), ("fixtures/evaluation/independent", 300),
                                                 ("fixtures/evaluation/development", 150)])
def test_every_call_is_labelled_with_level_decision_point_and_protocol(folder, minimum, protocols):
    records = _load(REPO / folder)
    assert len(records) >= minimum and len({r["id"] for r in records}) == len(records)
    for r in records:
        assert set(r) == FIELDS, r["id"]
        assert r["esi"] in (1, 2, 3, 4, 5) and r["protocol"] in protocols, r["id"]
        assert r["decision_point"] in {1: {"A"}, 2: {"B", "D"}}.get(r["esi"], {"C"}), r["id"]
    levels = Counter(r["esi"] for r in records)
    assert all(levels[k] >= minimum // 20 for k in (1, 2, 3, 4, 5))


def test_no_evaluation_call_shares_its_wording_with_a_training_call():
    train = {" ".join(r["transcript"].lower().split()) for r in _load(REPO / "fixtures/calls/written")}
    train |= {" ".join(json.loads(line)["transcript"].lower().split())
              for line in (REPO / "fixtures/calls/calls.jsonl").read_text().splitlines() if line.strip()}
    for folder in ("independent", "development"):
        for r in _load(REPO / "fixtures/evaluation" / folder):
            assert " ".join(r["transcript"].lower().split()) not in train, r["id"]


def test_the_labelling_guides_protocols_are_the_33_of_the_standard(protocols):
    assert len(protocols) == 33 and {"cardiac_arrest", "choking", "sick_person", "unknown_problem"} <= protocols
    assert load_catalogue().version  # the catalogue the guide's decision points are applied with loads
