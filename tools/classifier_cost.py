"""Time the trained triage predictor on batches of the corpus's calls (one torch thread, as the Celery worker
runs it) and fit the simulator's classifier cost, ``per_batch_s + n * per_call_s`` (scheduler/triage_stage.py).

    python -m tools.classifier_cost          # prints the batch times and --triage-cost A,B (milliseconds)
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence

from scheduler.triage_stage import ClassifierCost


def measure(batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), repeats: int = 5) -> ClassifierCost:
    """Time the trained triage predictor (one torch thread, as the Celery worker runs it) on the corpus's calls
    and fit ``per_batch_s + n * per_call_s`` by least squares on the medians."""
    import json
    import os
    import time
    from pathlib import Path

    import torch

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings

    from judgment.predictors import load_triage_predictor

    torch.set_num_threads(1)
    predictor = load_triage_predictor(settings.TRIAGE["PREDICTORS_DIR"])
    corpus = Path(settings.BASE_DIR) / "fixtures" / "calls" / "calls.jsonl"
    texts = [json.loads(line)["transcript"] for line in corpus.read_text().splitlines() if line.strip()]
    predictor.predict(texts[:4])
    points = []
    for n in batch_sizes:
        times = []
        for k in range(repeats):
            start = (k * n * 7) % (len(texts) - n)
            began = time.perf_counter()
            predictor.predict(texts[start : start + n])
            times.append(time.perf_counter() - began)
        points.append((n, statistics.median(times)))
    mean_n = statistics.fmean(n for n, _ in points)
    mean_t = statistics.fmean(t for _, t in points)
    slope = sum((n - mean_n) * (t - mean_t) for n, t in points) / sum((n - mean_n) ** 2 for n, _ in points)
    for n, t in points:
        print(f"batch {n:>3}: {t * 1000:7.1f} ms")
    return ClassifierCost(max(0.0, mean_t - slope * mean_n), slope)


def main() -> int:
    cost = measure()
    print(f"--triage-cost {cost.per_batch_s * 1000:.1f},{cost.per_call_s * 1000:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
