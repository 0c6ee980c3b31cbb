"""The labelled call corpus: size, fields, coverage, template-disjoint splits, reproducibility."""

import collections
import importlib
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "fixtures" / "calls" / "calls.jsonl"
FIELDS = {"id", "template_id", "split", "transcript", "esi", "scenario", "caller", "tone"}
CALLERS = {"patient", "relative", "bystander", "care_home_staff", "child"}


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def generator():
    return importlib.import_module("fixtures.calls.generate")


def test_corpus_has_at_least_1500_calls_with_the_documented_fields(corpus):
    assert len(corpus) >= 1500
    assert all(set(r) == FIELDS for r in corpus)
    assert len({r["id"] for r in corpus}) == len(corpus)
    assert all(r["esi"] in {1, 2, 3, 4, 5} and r["split"] in {"train", "test"} for r in corpus)
    assert CORPUS.stat().st_size < 5_000_000


def test_train_and_test_splits_share_no_template(corpus):
    train = {r["template_id"] for r in corpus if r["split"] == "train"}
    test = {r["template_id"] for r in corpus if r["split"] == "test"}
    assert train and test and not train & test


def test_about_a_fifth_of_templates_are_held_out_for_test(corpus):
    templates = {r["template_id"]: r["split"] for r in corpus}
    share = sum(s == "test" for s in templates.values()) / len(templates)
    assert 0.15 <= share <= 0.3


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_esi_level_is_covered_for_every_caller_type(corpus, split):
    cells = collections.Counter((r["esi"], r["caller"]) for r in corpus if r["split"] == split)
    missing = [(esi, c) for esi in range(1, 6) for c in sorted(CALLERS) if not cells[(esi, c)]]
    assert not missing


def test_corpus_varies_in_tone_length_and_includes_calm_esi_1_and_exaggerated_esi_5(corpus):
    assert {r["tone"] for r in corpus} == {"panicked", "calm", "minimising", "exaggerating"}
    lengths = sorted(len(r["transcript"].split()) for r in corpus)
    assert lengths[len(lengths) // 10] < 25 and lengths[-len(lengths) // 10] > 60 and lengths[-1] > 90
    assert any(r["esi"] == 1 and r["tone"] in {"calm", "minimising"} for r in corpus)
    assert any(r["esi"] == 5 and r["tone"] == "exaggerating" for r in corpus)


def test_danger_zone_vitals_appear_in_esi_2_calls(corpus):
    vitals = re.compile(r"(sats|heart rate|pulse|breathing) (are |is |like )?\d+")
    assert sum(1 for r in corpus if r["esi"] == 2 and vitals.search(r["transcript"].lower())) >= 20


def test_generator_reproduces_the_committed_corpus(generator):
    assert generator.render() == CORPUS.read_text(encoding="utf-8")


def test_scenarios_md_lists_exactly_the_generator_scenarios(corpus, generator):
    listed = set(re.findall(r"^\| (\w+) \|", (CORPUS.parent / "SCENARIOS.md").read_text(), re.M)) - {"scenario"}
    assert listed == set(generator.SCENARIOS)
    assert {r["scenario"] for r in corpus} <= listed
