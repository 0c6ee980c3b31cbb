"""Pure pieces of the classifier: the urgency-biased decision rule, vital-sign flags, metric definitions."""

import pytest
import torch

from inference.predictors.esi import decide_levels
from inference.predictors.evaluation import esi_metrics
from inference.predictors.lexical import vital_flags


def test_decision_rule_picks_the_more_urgent_level_when_in_doubt():
    # 45% ESI 2 vs 55% ESI 3: argmax says 3; with t_2 = 0.4 the rule says 2
    probs = torch.tensor([[0.0, 0.45, 0.55, 0.0, 0.0]], dtype=torch.float64)
    assert decide_levels(probs, (0.5, 0.5, 0.5, 0.5)).tolist() == [3]
    assert decide_levels(probs, (0.5, 0.4, 0.5, 0.5)).tolist() == [2]


def test_decision_rule_falls_back_to_esi_5_when_no_threshold_is_reached():
    probs = torch.tensor([[0.01, 0.01, 0.01, 0.02, 0.95]], dtype=torch.float64)
    assert decide_levels(probs, (0.5, 0.5, 0.5, 0.5)).tolist() == [5]


@pytest.mark.parametrize(
    ("text", "flag"),
    [("the watch says heart rate 150", 0), ("sats are 85 on the finger clip", 1),
     ("she's breathing like 35 times a minute", 2), ("the sugar is 2.1", 4)],
)
def test_danger_zone_vitals_are_flagged(text, flag):
    assert vital_flags(text)[flag] == 1.0


def test_normal_vitals_are_not_flagged():
    assert vital_flags("sats 97, pulse 80, breathing 16 a minute")[:5] == [0.0] * 5


def test_under_triage_counts_true_esi_1_2_predicted_3_to_5_and_over_triage_counts_more_urgent():
    true = [1, 2, 2, 3, 4, 5]
    pred = [3, 2, 1, 1, 4, 5]
    m = esi_metrics(true, pred)
    assert m["under_triage_rate"] == pytest.approx(1 / 3)
    assert m["over_triage_rate"] == pytest.approx(2 / 6)
    assert m["confusion_matrix"][0][2] == 1
    assert m["per_level"]["2"]["recall"] == pytest.approx(0.5)


def test_real_output_lengths_are_preferred_over_the_proxy(tmp_path):
    from inference.predictors.length_labels import SOURCE_REAL, length_labels

    records = [{"id": "a", "scenario": "fever", "esi": 4, "transcript": "hot"}, {"id": "b", "scenario": "fever", "esi": 4}]
    lengths = tmp_path / "output_lengths.jsonl"
    lengths.write_text('{"id": "a", "output_tokens": 42}\n')
    labels, source = length_labels(records, lengths, count_tokens=len)
    assert (labels, source) == ({"a": 42}, SOURCE_REAL)


def test_without_real_lengths_the_label_source_says_proxy(tmp_path):
    from inference.predictors.length_labels import length_labels

    records = [{"id": "a", "scenario": "fever", "esi": 4, "transcript": "hot"}]
    labels, source = length_labels(records, tmp_path / "absent.jsonl", count_tokens=lambda text: len(text.split()))
    assert source.startswith("proxy:") and labels["a"] >= 1


def test_threshold_tuning_folds_hold_out_whole_templates_of_every_variant():
    from inference.predictors.training import template_folds

    train = [{"template_id": f"{variant}.{t}"} for variant in ("fall.hip", "burns.small") for t in range(5) for _ in range(3)]
    folds = template_folds(train, 5, seed=7)
    fold_of_template = {}
    for record, fold in zip(train, folds, strict=True):
        assert fold_of_template.setdefault(record["template_id"], fold) == fold  # a template is never split
    for variant in ("fall.hip", "burns.small"):  # each variant's 5 templates are dealt over the 5 folds
        assert sorted(f for t, f in fold_of_template.items() if t.startswith(variant)) == [0, 1, 2, 3, 4]
    assert template_folds(train, 5, seed=7) == folds


def test_ngram_features_are_stable_hashed_unit_rows_and_ignore_terms_seen_once():
    from inference.predictors.ngrams import fit_idf, term_counts, terms, tfidf

    assert terms("He won't wake up") == ["he", "won't", "wake", "up", "he won't", "won't wake", "wake up"]
    texts = ["he won't wake up", "she won't wake up", "a cold and a runny nose"]
    idf = fit_idf(texts, buckets=1 << 10, min_df=2)
    assert int((idf > 0).sum()) == 5  # in two calls: won't, wake, up, "won't wake", "wake up"
    x = tfidf(texts, idf)
    assert torch.allclose(x[:2].norm(dim=1), torch.ones(2))
    assert x[2].abs().sum() == 0  # nothing in the third call was seen twice
    assert torch.equal(term_counts(["wake up"], 1 << 10), term_counts(["Wake UP!"], 1 << 10))


def test_mixing_weight_zero_is_the_embedding_head_alone():
    from inference.predictors.esi import mix

    a = torch.tensor([[0.6, 0.4, 0, 0, 0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 0.0, 1, 0, 0]], dtype=torch.float64)
    assert torch.equal(mix(a, b, 0.0), a) and torch.equal(mix(a, None, 0.5), a)
    assert torch.allclose(mix(a, b, 0.5), torch.tensor([[0.3, 0.2, 0.5, 0, 0]], dtype=torch.float64))
