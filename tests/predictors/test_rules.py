"""Pure pieces of the classifier: the urgency-biased decision rule, the judgement, metric definitions."""

import pytest
import torch

from judgment.clinical import AlgorithmResult, Reason
from judgment.clinical.algorithm import NearMiss
from judgment.predictors.esi import decide_levels
from judgment.predictors.judgement import judge
from training.predictors.evaluation import esi_metrics


def test_decision_rule_picks_the_more_urgent_level_when_in_doubt():
    # 45% ESI 2 vs 55% ESI 3: argmax says 3; with t_2 = 0.4 the rule says 2
    probs = torch.tensor([[0.0, 0.45, 0.55, 0.0, 0.0]], dtype=torch.float64)
    assert decide_levels(probs, (0.5, 0.5, 0.5, 0.5)).tolist() == [3]
    assert decide_levels(probs, (0.5, 0.4, 0.5, 0.5)).tolist() == [2]


def test_decision_rule_falls_back_to_esi_5_when_no_threshold_is_reached():
    probs = torch.tensor([[0.01, 0.01, 0.01, 0.02, 0.95]], dtype=torch.float64)
    assert decide_levels(probs, (0.5, 0.5, 0.5, 0.5)).tolist() == [5]


def _result(level, point, reason, danger=(), near=(), complaints=()):
    return AlgorithmResult(level, point, (Reason(point, reason),) if reason else (), None, danger, near=near,
                           complaints=complaints)


def test_where_algorithm_and_model_disagree_the_more_urgent_wins_and_the_call_is_uncertain():
    probs = [0.02, 0.08, 0.1, 0.7, 0.1]  # the model: ESI 4, confidently
    verdict = judge(probs, 4, _result(2, "B", "fever during chemotherapy"))
    assert (verdict.esi, verdict.decision_point, verdict.uncertain) == (2, "B", True)
    assert verdict.reasons == ("B: fever during chemotherapy",)
    agree = judge(probs, 4, _result(4, "C", "1 resource (X-ray) for a limb injury"))
    assert (agree.esi, agree.uncertain) == (4, False)


def test_split_probability_mass_goes_to_the_more_urgent_level_and_is_marked():
    near = (NearMiss("B", "chest_pain_over_40", "chest pain in an adult over 40", ("chest_pain",), complete=True),)
    verdict = judge([0.0, 0.45, 0.47, 0.08, 0.0], 3, _result(None, None, None, near=near),
                    labels={"chest_pain": "chest pain"})
    assert (verdict.esi, verdict.decision_point, verdict.uncertain) == (2, "B", True)
    assert verdict.reasons == ("B: chest pain (close to: chest pain in an adult over 40)",)


def test_the_model_raises_a_call_only_with_a_named_finding_behind_it():
    near = (NearMiss("A", "cord_prolapse", "cord prolapse or abnormal presentation in labour", ("labour",)),)
    backed = judge([0.8, 0.1, 0.05, 0.05, 0.0], 1, _result(3, "C", "2 resources (labs, consult) for labour", near=near),
                   labels={"labour": "labour"}, evidence=("cord", "hanging out"))
    assert (backed.esi, backed.decision_point) == (1, "A")
    assert backed.reasons[0] == "A: labour, with 'cord', 'hanging out'"


def test_a_model_raising_a_level_the_rules_gave_without_a_named_finding_leaves_it_uncertain_with_what_was_read():
    verdict = judge([0.1, 0.5, 0.2, 0.15, 0.05], 2, _result(5, "C", "no resources (a bruise)"),
                    evidence=("banged his shin", "table"))
    assert (verdict.esi, verdict.decision_point, verdict.uncertain) == (5, "C", True)
    assert verdict.reasons == (
        "C: no resources (a bruise)",
        "uncertain: calls worded like this one ('banged his shin', 'table') were often ESI 2; no high-risk "
        "finding named",
    )
    alone = judge([0.9, 0.05, 0.03, 0.01, 0.01], 1, _result(None, None, None), evidence=("went blue",))
    assert (alone.esi, alone.uncertain) == (1, True)  # no rule recognised the call: the model alone decides
    assert alone.reasons == ("uncertain: calls worded like this one ('went blue') were often ESI 1; no high-risk "
                             "finding named",)
    assert all("learned model" not in r for r in (*verdict.reasons, *alone.reasons))


def test_at_c_the_models_count_names_the_complaint_the_rules_recognised():
    verdict = judge([0.0, 0.02, 0.9, 0.05, 0.03], 3,
                    _result(4, "C", "1 resource (X-ray) for a limb injury", complaints=("a limb injury",)))
    assert (verdict.esi, verdict.reasons, verdict.uncertain) == (
        3, ("C: two or more resources expected for a limb injury",), False)


def test_danger_zone_vitals_lift_an_esi_3_verdict_to_2_at_decision_point_d():
    danger = (Reason("D", "SpO2 89% (danger zone < 92%)"),)
    verdict = judge([0.0, 0.1, 0.8, 0.1, 0.0], 3, _result(3, "C", "2 resources (labs, X-ray) for breathlessness", danger))
    assert (verdict.esi, verdict.decision_point, verdict.reasons) == (2, "D", ("D: SpO2 89% (danger zone < 92%)",))


def test_under_triage_counts_true_esi_1_2_predicted_3_to_5_and_over_triage_counts_more_urgent():
    true = [1, 2, 2, 3, 4, 5]
    pred = [3, 2, 1, 1, 4, 5]
    m = esi_metrics(true, pred)
    assert m["under_triage_rate"] == pytest.approx(1 / 3)
    assert m["over_triage_rate"] == pytest.approx(2 / 6)
    assert m["confusion_matrix"][0][2] == 1
    assert m["per_level"]["2"]["recall"] == pytest.approx(0.5)


def test_real_output_lengths_are_preferred_over_the_proxy(tmp_path):
    from training.predictors.length_labels import SOURCE_REAL, length_labels

    records = [{"id": "a", "scenario": "fever", "esi": 4, "transcript": "hot"}, {"id": "b", "scenario": "fever", "esi": 4}]
    lengths = tmp_path / "output_lengths.jsonl"
    lengths.write_text('{"id": "a", "output_tokens": 42}\n')
    labels, source = length_labels(records, lengths, count_tokens=len)
    assert (labels, source) == ({"a": 42}, SOURCE_REAL)


def test_without_real_lengths_the_label_source_says_proxy(tmp_path):
    from inference.guidance.plan import plan_guidance
    from judgment.protocols import load_library
    from training.predictors.length_labels import length_labels

    records = [{"id": "a", "protocol": "fall", "esi": 4, "transcript": "she slipped and hurt her wrist"}]
    labels, source = length_labels(records, tmp_path / "absent.jsonl", count_tokens=lambda text: len(text.split()))
    plan = plan_guidance(load_library(), "fall", "trauma", 4, None)
    assert source.startswith("proxy:") and labels["a"] == len(plan.text.split())


def test_threshold_tuning_holds_out_every_call_of_an_author_together():
    from training.predictors.pipeline import author_folds

    records = [{"id": f"w{a}-{i:03d}"} for a in (1, 2, 3) for i in range(4)]
    assert author_folds(records) == [0] * 4 + [1] * 4 + [2] * 4
    many = [{"id": f"w{a}-{i:03d}"} for a in range(1, 19) for i in range(2)]
    folds = author_folds(many, max_folds=6)
    assert len(set(folds)) == 6
    for a in range(1, 19):
        assert len({f for r, f in zip(many, folds, strict=True) if r["id"].startswith(f"w{a}-")}) == 1


def test_an_uncertain_verdict_names_the_more_urgent_level_another_signal_gave():
    # the model wanted ESI 2 without a named finding: the verdict stays at the rules' 5, uncertain against 2
    raised = judge([0.1, 0.5, 0.2, 0.15, 0.05], 2, _result(5, "C", "no resources (a bruise)"))
    assert (raised.esi, raised.uncertain, raised.alternative) == (5, True, 2)
    # a B rule stands against the model's confident 4: uncertain, and the other level is the less urgent one
    probs = [0.02, 0.08, 0.1, 0.7, 0.1]
    ruled = judge(probs, 4, _result(2, "B", "fever during chemotherapy"))
    assert (ruled.esi, ruled.uncertain, ruled.alternative) == (2, True, 4)
    # agreement: certain, nothing named
    agree = judge(probs, 4, _result(4, "C", "1 resource (X-ray) for a limb injury"))
    assert (agree.uncertain, agree.alternative) == (False, None)
