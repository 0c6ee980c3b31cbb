from datetime import timedelta

import pytest
from django.utils import timezone

from tests.triage.factories import make_call
from triage.models import AuditEvent, CallStatus
from triage.services.calls import call_transition
from triage.services.generation import CallProgress, calls_generation_record

pytestmark = pytest.mark.django_db


def _queued_call():
    call = make_call()
    call_transition(call=call, to_status=CallStatus.TRIAGED, actor="system:test")
    call_transition(call=call, to_status=CallStatus.QUEUED, actor="system:test")
    return call


def test_a_flush_stamps_each_transition_with_when_it_happened_in_the_engine_not_when_it_was_written():
    call = _queued_call()
    prefill = timezone.now() - timedelta(seconds=3)
    first_token, done = prefill + timedelta(milliseconds=40), prefill + timedelta(seconds=2)
    progress = CallProgress(call.pk)
    progress.move(CallStatus.PREFILLING, at=prefill)
    progress.move(CallStatus.DECODING, at=first_token)
    progress.guidance, progress.output_tokens = "Start CPR.", 3
    progress.move(CallStatus.DONE, at=done, output_tokens=3)
    assert calls_generation_record(progress=[progress]) == [call.pk]
    call.refresh_from_db()
    assert (call.prefill_started_at, call.first_token_at, call.done_at) == (prefill, first_token, done)
    assert (call.status, call.guidance, call.output_tokens) == (CallStatus.DONE, "Start CPR.", 3)
    assert AuditEvent.objects.filter(call=call, action="call.done").count() == 1


def test_a_transition_without_a_time_is_stamped_now():
    call = _queued_call()
    before = timezone.now()
    progress = CallProgress(call.pk)
    progress.move(CallStatus.PREFILLING)
    calls_generation_record(progress=[progress])
    call.refresh_from_db()
    assert call.prefill_started_at >= before
