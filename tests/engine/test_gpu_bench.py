"""The GPU bench runs on a CPU with a tiny model (as CI runs it, so it cannot rot) and imports nothing but torch,
transformers and our inference and scheduler packages: a GPU machine has no Django, Redis or spaCy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN = """
import sys
from tools.gpu_bench.__main__ import main
main(["--device", "cpu", "--tiny", "--threads", "1", "--out", sys.argv[1]])
heavy = sorted(m for m in ("django", "spacy", "medspacy", "redis", "celery", "psycopg") if m in sys.modules)
print("IMPORTED", heavy)
"""


def test_the_bench_measures_every_section_on_a_cpu_with_only_the_inference_packages(tmp_path):
    done = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=True)
    assert "IMPORTED []" in done.stdout, done.stdout
    report = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert [row["concurrency"] for row in report["throughput"]] == [1, 4]
    assert all(row["engine_tok_s"] > 0 and row["sequential_tok_s"] > 0 for row in report["throughput"])
    runs = {run["policy"]: run for run in report["burst"]["runs"]}
    assert set(runs) == {"fcfs", "semantic"}
    for run in runs.values():
        assert run["calls"] == report["size"]["burst_calls"] and run["tokens"] > 0
        assert sum(level["calls"] for level in run["by_level"].values()) == run["calls"]  # every call answered
    assert {"alpha1", "beta_s_per_token", "gamma1"} <= set(report["costs"]["calibrated"])
    assert report["exactness"] == {"float32": {"swap": True, "recompute": True, "partial": True}}
    table = (tmp_path / "gpu_bench.txt").read_text()
    assert "burst: ESI-1 TTFT p50 FCFS / semantic" in table and "exactness float32" in table
