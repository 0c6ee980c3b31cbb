"""The trained classifier (tiny config) on its test split: the model card is what the code computes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judgment.predictors import REPO_ROOT, PredictorsNotBuilt, load_triage_predictor
from training.predictors import pipeline as training

ARREST = "My husband has just collapsed in the kitchen, he's not breathing and I can't feel a pulse, his lips are blue"


def _metrics(directory: Path) -> dict:
    return json.loads((directory / "metrics.json").read_text())


def test_model_card_numbers_equal_what_evaluation_recomputes_from_predictions(trained_predictors_dir):
    metrics = _metrics(trained_predictors_dir)
    config = training.CONFIGS[metrics["config"]["name"]]
    predictor = load_triage_predictor(trained_predictors_dir)
    records = training.evaluation_set("independent", config)
    with training.deterministic(config.seed, config.threads):
        predictions = training.predict_records(predictor, records)
    recomputed = training.evaluate(predictions, records, training.protocol_families())

    assert recomputed == {k: v for k, v in metrics["evaluation"]["independent"].items() if k not in ("path", "length")}
    card = (trained_predictors_dir / "MODEL_CARD.md").read_text()
    esi = recomputed["esi"]
    assert f"| {esi['n']} | {esi['accuracy']:.3f} | {100 * esi['under_triage_rate']:.1f}% |" in card
    protocol = recomputed["protocol"]
    assert f"| {protocol['n']} | {100 * protocol['right']:.1f}% | {100 * protocol['unclear']:.1f}% |" in card
    assert (trained_predictors_dir / "reliability.png").read_bytes()[:4] == b"\x89PNG"


def test_evaluation_sets_are_written_apart_from_the_training_corpus(trained_predictors_dir):
    config = training.CONFIGS[_metrics(trained_predictors_dir)["config"]["name"]]
    trained_on = {r["transcript"] for r in training.esi_training_records(config)}
    for name in training.EVALUATION_SETS:
        assert not trained_on & {r["transcript"] for r in training.evaluation_set(name, config)}
    assert not training.EVALUATION_DIR.is_relative_to(training.WRITTEN_CORPUS)


_MICRO_TRAINING = """
import dataclasses, json, sys
from pathlib import Path
from training.predictors import pipeline as training
micro = dataclasses.replace(training.TINY, name="micro", train_limit=120, test_limit=30,
                            eval_limit=20)
metrics = training.train(micro, out_dir=Path(sys.argv[1]), lengths_path=None)
metrics.pop("timing")
print(json.dumps(metrics, sort_keys=True))
"""


def _start_micro_training(out_dir: Path, hash_seed: str) -> subprocess.Popen:
    """Its output to files: two processes writing to pipes read one after the other could block on a full one."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out_dir.mkdir(parents=True)
    with open(out_dir.with_suffix(".out"), "w") as out, open(out_dir.with_suffix(".err"), "w") as err:
        return subprocess.Popen([sys.executable, "-c", _MICRO_TRAINING, str(out_dir)], env=env, cwd=REPO_ROOT,
                                stdout=out, stderr=err)


def _metrics_of(training: subprocess.Popen, out_dir: Path) -> dict:
    training.wait(timeout=300)
    assert training.returncode == 0, out_dir.with_suffix(".err").read_text()[-4000:]
    return json.loads(out_dir.with_suffix(".out").read_text().strip().splitlines()[-1])


def test_training_twice_with_the_same_seed_gives_the_same_metrics(tmp_path):
    """Two processes with different string hashing (set order) train the same bytes (side by side: the suite's
    time)."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    trainings = [_start_micro_training(d, seed) for d, seed in zip(dirs, ("1", "2"), strict=True)]
    first, second = (_metrics_of(t, d) for t, d in zip(trainings, dirs, strict=True))
    assert second == first  # same version (a hash of the weights), thresholds and numbers
    assert (tmp_path / "a" / "heads.safetensors").read_bytes() == (tmp_path / "b" / "heads.safetensors").read_bytes()


def test_a_cardiac_arrest_call_is_esi_1_at_decision_point_a_with_its_reason(trained_predictors_dir):
    [prediction] = load_triage_predictor().predict([ARREST])
    assert (prediction.esi, prediction.decision_point) == (1, "A")
    assert "A: not breathing or no pulse" in prediction.reasons
    assert "not breathing" in prediction.findings
    assert len(prediction.probabilities) == 5
    assert sum(prediction.probabilities) == pytest.approx(1.0, abs=1e-9)
    assert prediction.predicted_output_tokens >= 1


def test_a_protocol_below_the_confidence_threshold_is_unclear_with_the_likeliest_kept(trained_predictors_dir):
    from judgment.predictors.protocol import choose

    ids = ("cardiac_arrest", "choking", "fall")
    confident = choose([0.7, 0.2, 0.1], ids, threshold=0.5)
    assert (confident.protocol, confident.runner_up, confident.confidence) == ("cardiac_arrest", "choking", 0.7)
    unsure = choose([0.3, 0.45, 0.25], ids, threshold=0.5)
    assert (unsure.protocol, unsure.likeliest, unsure.runner_up) == ("unclear", "choking", "cardiac_arrest")
    [prediction] = load_triage_predictor().predict([ARREST])
    assert prediction.protocol.likeliest in training.protocol_families()


def test_predict_keeps_input_order_and_accepts_an_empty_batch(trained_predictors_dir):
    predictor = load_triage_predictor()
    texts = [ARREST, "I've got a bit of a cold and a runny nose", ARREST]
    batch = predictor.predict(texts)
    assert [p.esi for p in batch] == [predictor.predict([t])[0].esi for t in texts]
    same = [(p.esi, p.decision_point, p.reasons, p.uncertain, p.findings, p.predicted_output_tokens) for p in batch]
    assert same[0] == same[2]
    assert batch[0].probabilities == pytest.approx(batch[2].probabilities, abs=1e-7)  # row order in one GEMM
    assert predictor.predict([]) == []


def test_loader_follows_the_environment_and_caches_per_process(trained_predictors_dir):
    predictor = load_triage_predictor()
    assert predictor is load_triage_predictor(trained_predictors_dir)
    assert predictor.version == _metrics(trained_predictors_dir)["version"]


def test_loading_an_untrained_directory_says_how_to_build_it(tmp_path):
    with pytest.raises(PredictorsNotBuilt, match="train_predictors"):
        load_triage_predictor(tmp_path)


def test_a_likeliest_protocol_too_close_to_its_runner_up_is_unclear():
    from judgment.predictors.protocol import choose

    ids = ("stroke", "headache", "fall")
    assert choose([0.5, 0.42, 0.08], ids, threshold=0.3, margin=0.1).protocol == "unclear"
    assert choose([0.5, 0.38, 0.12], ids, threshold=0.3, margin=0.1).protocol == "stroke"


def test_the_decision_is_tuned_to_fewest_costed_misfires_and_unclears():
    import torch

    from training.predictors.fitting import WRONG_CONFIDENT_COST, tune_protocol_decision

    ids = ("a", "b", "c")
    # Confident calls are right; calls with a close runner-up are wrong half the time: a margin pays off.
    rows = [[0.9, 0.05, 0.05]] * 8 + [[0.5, 0.45, 0.05]] * 2
    true = ["a"] * 8 + ["a", "b"]
    threshold, margin = tune_protocol_decision(torch.tensor(rows), true, ids)
    assert margin > 0.05 and WRONG_CONFIDENT_COST > 1
    decided = [row for row in rows if row[0] >= threshold and row[0] - row[1] >= margin]
    assert len(decided) == 8


# The urgency issue's probes (ours, not from an evaluation set), with the handbook's level for each.
PROBES = [
    ("he stubbed his toe", 5),
    ("there was a lot of blood from his hand but it has stopped now with a towel pressed on it", 4),
    ("bee sting on his arm, it is red, his throat is not swollen and his breathing is fine", 5),
    ("my 18 month old climbed onto the balcony and fell to the patio below, one floor, he cried at once and now "
     "seems fine", 2),
    ("police officer here, we have CPR in progress on a male in his sixties at the bus station", 1),
    ("this is the nurse at Elm Lodge, resident has a 30 percent burn to the torso from a kettle", 2),
    ("he fell about ten feet off a ladder and landed on his feet, he cannot walk, back pain", 2),
    ("he banged his shin on the table, it's a bit bruised, his breathing is okay and he's walking about", 5),
]


def test_the_probes_get_a_level_within_one_of_the_handbooks_and_reasons_a_clinician_would_sign(
        trained_predictors_dir):
    """With the tiny model the tests train: the probes the rules decide (ESI 1-2) within one of the handbook's
    level, the minor ones never raised to ESI 1-2 (no finding names a reason to); the full model's levels on
    the same probes are all within one (the urgency section of BENCHMARKS.md)."""
    predictions = load_triage_predictor(trained_predictors_dir).predict([text for text, _ in PROBES])
    for (text, level), prediction in zip(PROBES, predictions, strict=True):
        if level <= 2:
            assert abs(prediction.esi - level) <= 1, (text, prediction)
        else:
            assert prediction.esi >= 3, (text, prediction)
        assert prediction.reasons, text
        for reason in prediction.reasons:
            assert reason.split(":")[0] in ("A", "B", "C", "D", "uncertain"), reason
            assert "learned model" not in reason, reason
    assert "stab or gunshot wound" not in predictions[0].findings
    assert "heavy, uncontrolled bleeding" not in predictions[1].findings
    assert "not breathing" not in predictions[2].findings
