"""The sweep records calls nobody acknowledged within their tier's time, once each, with an audit row."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.fixtures.predictors import ARREST_TRANSCRIPT
from tests.triage.factories import make_call
from triage.models import AuditEvent, Call, Tier
from triage.services.assessments import call_triage_record
from triage.services.board import call_acknowledge, calls_escalate_overdue

pytestmark = pytest.mark.django_db


@pytest.fixture
def arrest(triage_predictor, tiers):
    Tier.objects.filter(esi_levels=[1]).update(acknowledge_within_s=30)

    def arrest() -> Call:
        call = make_call(transcript=ARREST_TRANSCRIPT)
        [prediction] = triage_predictor.predict([call.transcript])
        return call_triage_record(call=call, prediction=prediction, model_version="m", latency_ms=1)

    return arrest


def test_an_unacknowledged_call_past_its_tiers_time_is_escalated_once(arrest, dispatcher):
    late, acknowledged, fresh = arrest(), arrest(), arrest()
    call_acknowledge(call=acknowledged, user=dispatcher)
    a_minute_ago = timezone.now() - timedelta(seconds=60)
    Call.objects.filter(pk__in=[late.pk, acknowledged.pk]).update(triaged_at=a_minute_ago)
    assert calls_escalate_overdue() == [late.pk]
    assert calls_escalate_overdue() == []  # once
    late.refresh_from_db()
    assert late.escalated_at is not None and fresh.level == 1
    audit = AuditEvent.objects.get(call=late, action="call.escalated")
    assert (audit.actor, audit.data) == ("system:triage", {"acknowledge_within_s": 30.0, "level": 1})
