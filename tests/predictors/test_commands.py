"""`manage.py classify` (offline, no database) and `manage.py train_predictors` (thin wrapper)."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_classify_prints_one_json_line_per_input_without_database_access(trained_predictors_dir, tmp_path):
    # no `db` fixture: pytest-django fails the test if the command touches the database
    calls = _write(
        tmp_path / "calls.jsonl",
        json.dumps({"id": "a", "transcript": "he's collapsed and not breathing"}),
        "",
        json.dumps({"id": 7, "transcript": "I've got a splinter in my finger"}),
    )
    out = io.StringIO()
    call_command("classify", str(calls), stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in rows] == ["a", 7]
    assert (rows[0]["esi"], rows[0]["decision_point"]) == (1, "A")
    for row in rows:
        assert set(row) == {"id", "esi", "decision_point", "reasons", "uncertain", "alternative_esi", "findings", "protocol",
                            "probabilities", "predicted_output_tokens"}
        protocol = row["protocol"]
        assert {"id", "version", "confidence", "runner_up"} <= set(protocol)
        assert protocol["runner_up"] != protocol["likeliest"] and 0 < protocol["confidence"] <= 1
        assert (protocol["version"] is None) == (protocol["id"] == "unclear")
        assert row["esi"] in range(1, 6) and len(row["probabilities"]) == 5
        assert row["decision_point"] in "ABCD" and row["reasons"] and isinstance(row["uncertain"], bool)
        assert all(r.startswith(f"{r[0]}: ") for r in row["reasons"])
        assert sum(row["probabilities"]) == pytest.approx(1.0)
        assert isinstance(row["predicted_output_tokens"], int)


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [("{not json", "line 2: not valid JSON"), ('{"id": 1}', 'line 2: "transcript" must be'),
     ('["id", "transcript"]', "line 2: expected an object")],
)
def test_classify_names_the_line_number_of_a_bad_line(trained_predictors_dir, tmp_path, bad_line, message):
    calls = _write(tmp_path / "calls.jsonl", json.dumps({"id": "ok", "transcript": "a cough"}), bad_line)
    out = io.StringIO()
    with pytest.raises(CommandError, match=message):
        call_command("classify", str(calls), stdout=out)
    assert out.getvalue() == ""  # nothing printed before the error


def test_classify_works_with_no_database_reachable_and_no_secret_key(trained_predictors_dir, tmp_path):
    """Scoring calls signs nothing: it runs on production settings without DJANGO_SECRET_KEY."""
    calls = _write(tmp_path / "calls.jsonl", json.dumps({"id": "x", "transcript": "my chest is crushing"}))
    env = {**os.environ, "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "REDIS_URL": "redis://127.0.0.1:1/0",
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    env.pop("DJANGO_SECRET_KEY", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "classify", str(calls)], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["id"] == "x"


@pytest.fixture
def training_calls(monkeypatch) -> dict:
    """Replace training.train by a recorder; the command is a thin wrapper."""
    from training.predictors import pipeline as training

    seen: dict = {}

    def fake_train(config, **kwargs):
        seen.update(config=config, **kwargs)
        esi = {"under_triage_rate": 0.0, "accuracy": 1.0, "over_triage_rate": 0.0, "n": 3,
               "per_level": {"1": {"recall": 1.0}}}
        return {"version": "v", "catalogue": "c", "evaluation": {"independent": {"esi": esi, "length": {"mae_tokens": 1.0}}},
                "test": {"esi": esi}, "length_label_source": "real",
                "timing": {"train_s": 0.1}}

    monkeypatch.setattr(training, "train", fake_train)
    return seen


def test_train_predictors_passes_its_options_to_training(training_calls, tmp_path):
    from training.predictors import pipeline as training

    seen = training_calls
    lengths = _write(tmp_path / "lengths.jsonl", '{"id": "call-00001", "output_tokens": 12}')
    out = io.StringIO()
    call_command("train_predictors", "--tiny", "--out", str(tmp_path / "m"), "--lengths", str(lengths), stdout=out)
    assert seen["config"] is training.TINY
    assert seen["out_dir"] == tmp_path / "m" and seen["lengths_path"] == lengths
    assert seen["written_path"] == training.WRITTEN_CORPUS
    assert "independent set: exact 1.000, under-triage 0.0%" in out.getvalue()


def test_train_predictors_accepts_string_paths_from_call_command(training_calls, tmp_path):
    lengths = _write(tmp_path / "lengths.jsonl", '{"id": "call-00001", "output_tokens": 12}')
    call_command("train_predictors", lengths=str(lengths), out=str(tmp_path / "m"), stdout=io.StringIO())
    assert training_calls["lengths_path"] == lengths and training_calls["out_dir"] == tmp_path / "m"


def test_train_predictors_refuses_a_missing_lengths_file(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        call_command("train_predictors", "--tiny", "--lengths", str(tmp_path / "missing.jsonl"))
