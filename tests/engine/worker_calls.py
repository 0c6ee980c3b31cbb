"""Calls for the inference-worker tests, put on the stream by the triage service as the Celery task does."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.utils import timezone

from triage import realtime
from triage.models import Call
from triage.redis_clients import redis_bytes_client

TRANSCRIPTS = [
    "My husband just collapsed in the kitchen, he is not breathing and I cannot wake him.",
    "I have a question about my prescription refill.",
    "My son is choking on a piece of meat, he cannot cough or speak.",
    "There is a lot of blood, my friend cut his arm on a window and it will not stop.",
    "I have a small cut on my hand, it stopped bleeding.",
    "My mother's face is drooping and her speech is slurred since ten minutes.",
]


@dataclass(frozen=True)
class FixedPrediction:
    """What the ESI classifier and length predictor would return (the triage service's input)."""

    esi: int
    probabilities: tuple[float, ...]
    predicted_output_tokens: int
    decision_point: str = "C"
    reasons: tuple[str, ...] = ("C: fixed for the test",)
    uncertain: bool = False
    alternative_esi: int | None = None
    findings: tuple[str, ...] = ()
    protocol: None = None  # no protocol selected: the assessment records none
    patient_age: float | None = None


def burst(n: int, monkeypatch, predicted_output_tokens: int = 32,  # noqa: ANN001
          levels: list[int] | None = None) -> list[int]:
    """n calls through intake and triage; the triage service appends their stream entries on commit. Their
    levels cycle through ESI 1-5, or are ``levels``."""
    from triage.services import calls as call_services
    from triage.services.assessments import calls_triage_record
    from triage.services.calls import call_create

    monkeypatch.setattr(call_services, "send_triage_task", lambda call_id: True)  # no Celery: triaged below
    created = [
        call_create(client=None, external_id=f"crash-{uuid.uuid4().hex[:10]}", received_at=timezone.now(),
                    transcript=TRANSCRIPTS[i % len(TRANSCRIPTS)])[0]
        for i in range(n)
    ]
    predictions = []
    for i in range(n):
        esi = levels[i] if levels is not None else 1 + i % 5
        probabilities = tuple(0.8 if level == esi else 0.05 for level in range(1, 6))
        predictions.append(FixedPrediction(esi=esi, probabilities=probabilities, predicted_output_tokens=predicted_output_tokens))
    calls_triage_record(calls=created, predictions=predictions, model_version="test", latency_ms=1.0)
    ids = [c.pk for c in created]
    redis_bytes_client().delete(*[realtime.token_stream_key(i) for i in ids])
    return ids


def statuses(ids: list[int]) -> dict[int, str]:
    return dict(Call.objects.filter(pk__in=ids).values_list("pk", "status"))
