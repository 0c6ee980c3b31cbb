"""Every kind of bad input gets a 4xx JSON error naming the field, and writes nothing."""

import json

import pytest

from tests.triage.factories import call_payload
from triage.models import AuditEvent, Call

pytestmark = pytest.mark.django_db
URL = "/api/v1/calls/"


def _post_raw(api, body: bytes, content_type="application/json"):
    return api.generic("POST", URL, body, content_type=content_type)


def _assert_refused(response, status, field):
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "fields"}
    assert field in error["fields"], error
    assert Call.objects.count() == 0 and not AuditEvent.objects.filter(call__isnull=False).exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"transcript": None}, "transcript"),
        ({"transcript": ""}, "transcript"),
        ({"transcript": "   \n\t "}, "transcript"),
        ({"transcript": 12345}, "transcript"),
        ({"transcript": ["a"]}, "transcript"),
        ({"transcript": "help\x00me"}, "transcript"),
        ({"transcript": "bell\x07"}, "transcript"),
        ({"transcript": "esc\x1b[31m"}, "transcript"),
        ({"transcript": "c1\x85"}, "transcript"),
        ({"external_id": ""}, "external_id"),
        ({"external_id": "a" * 101}, "external_id"),
        ({"external_id": "two\nlines"}, "external_id"),
        ({"external_id": 7}, "external_id"),
        ({"received_at": "yesterday"}, "received_at"),
        ({"received_at": 1700000000}, "received_at"),
        ({"received_at": "2999-01-01T00:00:00Z"}, "received_at"),
        ({"location_lat": "53.8"}, "location_lat"),
        ({"location_lat": True}, "location_lat"),
        ({"location_lat": 91}, "location_lat"),
        ({"location_lon": -181.0}, "location_lon"),
        ({"caller_name": {"first": "a"}}, "caller_name"),
        ({"priority": 1}, "priority"),
        ({"level": 1, "status": "done"}, "level"),
    ],
)
def test_a_bad_field_is_refused_by_name(api, overrides, field):
    payload = {k: v for k, v in call_payload(**overrides).items() if v is not None}
    _assert_refused(api.post(URL, payload, format="json"), 400, field)


def test_a_missing_transcript_is_named(api):
    payload = call_payload()
    del payload["transcript"]
    _assert_refused(api.post(URL, payload, format="json"), 400, "transcript")


def test_a_transcript_over_the_limit_is_refused(api, settings):
    settings.TRIAGE = {**settings.TRIAGE, "TRANSCRIPT_MAX_CHARS": 50}
    _assert_refused(api.post(URL, call_payload(transcript="x" * 51), format="json"), 400, "transcript")


def test_the_default_transcript_limit_is_20000_characters(api):
    assert api.post(URL, call_payload(transcript="y" * 20000), format="json").status_code == 201
    response = api.post(URL, call_payload(transcript="y" * 20001), format="json")
    assert response.status_code == 400 and "transcript" in response.json()["error"]["fields"]


def test_a_lone_surrogate_is_refused(api):
    body = json.dumps(call_payload(transcript="x")).replace('"transcript": "x"', '"transcript": "bad \\ud800 char"')
    _assert_refused(_post_raw(api, body.encode()), 400, "transcript")


def test_invalid_utf8_is_refused(api):
    body = json.dumps(call_payload(transcript="PLACEHOLDER")).encode().replace(b"PLACEHOLDER", b"\xff\xfe")
    _assert_refused(_post_raw(api, body), 400, "body")


@pytest.mark.parametrize("body", [b"{", b'{"transcript": }', b"", b"NaN", b'{"a": 1,}'])
def test_malformed_json_is_refused(api, body):
    response = _post_raw(api, body)
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) & {"body", "transcript", "non_field_errors"}
    assert Call.objects.count() == 0


@pytest.mark.parametrize("body", [b"[]", b'"a string"', b"42"])
def test_a_json_body_that_is_not_an_object_is_refused(api, body):
    _assert_refused(_post_raw(api, body), 400, "non_field_errors")


def test_an_oversized_body_gets_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    _assert_refused(api.post(URL, call_payload(transcript="z" * 2000), format="json"), 413, "body")


def test_a_non_json_content_type_gets_415(api):
    _assert_refused(_post_raw(api, b"transcript=hello", content_type="application/x-www-form-urlencoded"), 415, "body")


@pytest.mark.parametrize(
    ("body", "field"),
    [({"esi": 0, "reason": "r"}, "esi"), ({"esi": 6, "reason": "r"}, "esi"), ({"esi": "2", "reason": "r"}, "esi"),
     ({"esi": 2.0, "reason": "r"}, "esi"), ({"esi": True, "reason": "r"}, "esi"), ({"esi": 2}, "reason"),
     ({"esi": 2, "reason": ""}, "reason"), ({"esi": 2, "reason": "r", "level": 1}, "level")],
)
def test_an_invalid_override_is_refused_by_name(session_api, triaged_call, body, field):
    response = session_api.patch(f"/api/v1/calls/{triaged_call.pk}/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    triaged_call.refresh_from_db()
    assert triaged_call.level == 1 and triaged_call.assessment.override_esi is None

