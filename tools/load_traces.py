"""The call traces ``manage.py loadtest`` replays: the corpus's calls on burst, Poisson or mass-casualty offsets,
a dispatch centre's day (written calls, Poisson), optionally only those the classifier puts at given levels."""

from __future__ import annotations

import json
import random
from pathlib import Path

from django.conf import settings

CORPUS = Path(settings.BASE_DIR) / "fixtures" / "calls" / "calls.jsonl"
WRITTEN = Path(settings.BASE_DIR) / "fixtures" / "calls" / "written"


def load_trace(path: Path, n: int, pattern: str, rate: float, seed: int, duration_s: float = 120.0,
               burst_at_s: float = 30.0) -> list[tuple[float, dict]]:
    """(offset seconds, record) for n calls: every ESI level represented, shuffled, seeded. ``mass-casualty``: a
    Poisson background at ``rate`` over ``duration_s`` and a burst of n calls over 10 s from ``burst_at_s``,
    the levels drawn in the simulator's mixes (scheduler.workloads), each a corpus call of that level."""
    rng = random.Random(seed)
    if pattern == "incidents":
        return _incidents(n)
    if pattern == "dispatch":
        return _dispatch_centre(n, rate, rng)
    records = _read_jsonl([path])
    if pattern == "mass-casualty":
        return _mass_casualty(records, rng, n, rate, duration_s, burst_at_s)
    rng.shuffle(records)
    picked = (records * (1 + n // max(1, len(records))))[:n]
    offsets, t = [], 0.0
    for _ in picked:
        offsets.append(t)
        if pattern == "poisson":
            t += rng.expovariate(rate)
    return list(zip(offsets, picked, strict=True))


def _mass_casualty(records: list[dict], rng: random.Random, n: int, rate: float, duration_s: float,
                   burst_at_s: float) -> list[tuple[float, dict]]:
    from scheduler.workloads import BACKGROUND_ESI_MIX, CASUALTY_ESI_MIX

    by_level = _by_level(records)

    def call(mix: dict[int, float]) -> dict:
        return _call_in_mix(rng, by_level, mix)

    trace, t = [], rng.expovariate(rate)
    while t < duration_s:
        trace.append((t, call(BACKGROUND_ESI_MIX)))
        t += rng.expovariate(rate)
    trace += [(burst_at_s + rng.uniform(0.0, 10.0), call(CASUALTY_ESI_MIX)) for _ in range(n)]
    return sorted(trace, key=lambda item: item[0])


def _dispatch_centre(n: int, rate: float, rng: random.Random) -> list[tuple[float, dict]]:
    """n calls at Poisson offsets (``rate`` per second), their levels drawn in a dispatch centre's mix, each a
    written call (fixtures/calls/written/, by its label) of that level."""
    from scheduler.workloads import DISPATCH_CENTRE_ESI_MIX

    by_level = _by_level(_read_jsonl(sorted(WRITTEN.glob("calls-*.jsonl"))))
    trace, t = [], 0.0
    for _ in range(n):
        trace.append((t, _call_in_mix(rng, by_level, DISPATCH_CENTRE_ESI_MIX)))
        t += rng.expovariate(rate)
    return trace


def _incidents(n: int, window_s: float = 10.0) -> list[tuple[float, dict]]:
    """The linked-calls burst (tools/incident_burst.py: 20 callers about 3 incidents among n - 20 unrelated
    calls, with their locations), its ten minutes compressed into ``window_s``; each record names its incident."""
    from tools.incident_burst import WINDOW_S, incident_burst

    calls = incident_burst(unrelated=max(0, n - 20))
    return [(c.offset_s * window_s / WINDOW_S, {
        "transcript": c.transcript, "incident": c.incident, "location_lat": c.lat, "location_lon": c.lon,
        "location_uncertainty_m": c.uncertainty_m, "location_address": c.address}) for c in calls]


def _read_jsonl(paths: list[Path]) -> list[dict]:
    return [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]


def _by_level(records: list[dict]) -> dict[int, list[dict]]:
    by_level: dict[int, list[dict]] = {}
    for record in records:
        by_level.setdefault(int(record["esi"]), []).append(record)
    return by_level


def _call_in_mix(rng: random.Random, by_level: dict[int, list[dict]], mix: dict[int, float]) -> dict:
    """A level drawn in ``mix``, then one of its calls."""
    return rng.choice(by_level[rng.choices(list(mix), weights=list(mix.values()))[0]])


def only_levels(trace: list[tuple[float, dict]], levels: set[int]) -> list[tuple[float, dict]]:
    """The trace's calls that the classifier (the one triage runs) puts at ``levels``, at their own offsets."""
    from triage.tasks import load_predictor

    predictions = load_predictor().predict([record["transcript"] for _, record in trace])
    return [item for item, prediction in zip(trace, predictions, strict=True) if prediction.esi in levels]
