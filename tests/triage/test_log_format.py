"""JSON log lines carry the call they are about, so one call can be followed across processes."""

import json
import logging

import pytest

from config.log_format import JsonFormatter
from tests.triage.factories import make_call
from triage.models import CallStatus
from triage.services.calls import call_transition


@pytest.mark.django_db
def test_a_state_change_is_one_json_line_naming_the_call(caplog):
    call = make_call()
    with caplog.at_level(logging.INFO, logger="triage.services.calls"):
        call_transition(call=call, to_status=CallStatus.FAILED, actor="system:test")
    [record] = [r for r in caplog.records if r.name == "triage.services.calls"]
    line = json.loads(JsonFormatter(process_kind="worker").format(record))
    assert (line["call_id"], line["from_status"], line["to_status"], line["process"]) == (
        call.pk, "received", "failed", "worker")
    assert line["level"] == "INFO" and line["message"] == f"call {call.pk}: received -> failed (system:test)"


def test_an_exception_is_kept_in_the_line():
    try:
        raise RuntimeError("CUDA out of memory")
    except RuntimeError:
        record = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "step failed", (), None)
        import sys

        record.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(record))
    assert "CUDA out of memory" in line["exception"] and "call_id" not in line
