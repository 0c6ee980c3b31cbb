"""Hostile request bodies get a 4xx in the API's one error shape, never a 500, and write nothing."""

from __future__ import annotations

import json

import pytest

from tests.triage.factories import call_payload, make_call
from triage.models import AuditEvent, Call

pytestmark = pytest.mark.django_db
URL = "/api/v1/calls/"


def _post_raw(api, body: bytes, content_type: str = "application/json"):
    return api.generic("POST", URL, body, content_type=content_type)


def _assert_refused(response, status: int = 400, field: str = "body") -> dict:
    assert response.status_code == status, response.content[:500]
    error = response.json()["error"]
    assert set(error) == {"code", "message", "fields"} and field in error["fields"], error
    assert Call.objects.count() == 0 and not AuditEvent.objects.filter(call__isnull=False).exists()
    return error


@pytest.mark.parametrize(
    "body",
    # (objects: as many levels as fit under the 256 kB body limit, which would answer 413 first)
    [b"[" * 50_000, b"[" * 50_000 + b"]" * 50_000, b'{"a":' * 50_000, b'{"a":' * 40_000 + b"1" + b"}" * 40_000],
    ids=["open-arrays", "closed-arrays", "open-objects", "closed-objects"],
)
def test_fifty_thousand_nested_levels_are_refused_not_a_server_error(api, body):
    error = _assert_refused(_post_raw(api, body))
    assert error["code"] == "parse_error"


def _nested(levels: int) -> object:
    value: object = "x"
    for _ in range(levels):
        value = [value]
    return value


def test_nesting_past_the_limit_inside_a_field_is_refused_as_too_deep(api):
    deep = json.dumps(call_payload(caller_name=_nested(40)))
    error = _assert_refused(_post_raw(api, deep.encode()))
    assert "nested deeper than" in error["message"]


def test_an_ordinary_call_is_not_too_deep(api):
    assert api.post(URL, call_payload(), format="json").status_code == 201


@pytest.mark.parametrize(
    ("number", "field"),
    [
        (b"1e999", "location_lat"),  # overflows to infinity: the field says it must be finite
        (b"-1e999", "location_lat"),
        (b"1" + b"0" * 400, "body"),  # larger than any number the API stores (float() of it overflowed)
        (b"-" + b"9" * 20, "body"),
        (b"9" * 5000, "body"),  # past Python's own limit for int() of a string
    ],
    ids=["inf", "-inf", "400-digits", "20-digits", "5000-digits"],
)
def test_huge_numbers_are_refused(api, number, field):
    body = json.dumps(call_payload(location_lat="PLACEHOLDER")).encode().replace(b'"PLACEHOLDER"', number)
    _assert_refused(_post_raw(api, body), 400, field)


def test_a_tiny_number_that_underflows_to_zero_is_just_zero(api):
    body = json.dumps(call_payload(location_lat="PLACEHOLDER")).encode().replace(b'"PLACEHOLDER"', b"1e-999")
    assert _post_raw(api, body).status_code == 201


@pytest.mark.parametrize(
    "payload",
    [b'{"transcript": "\xff"}', b'{"transcript": "\xc3\x28"}', b'{"transcript": "\xed\xa0\x80"}', b"\xfe\xff\x00{"],
    ids=["ff", "bad-continuation", "encoded-surrogate", "utf16-bom"],
)
def test_invalid_utf8_is_refused(api, payload):
    _assert_refused(_post_raw(api, payload))


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml", ""],
)
def test_a_wrong_content_type_gets_415(api, content_type):
    _assert_refused(_post_raw(api, json.dumps(call_payload()).encode(), content_type=content_type), 415)


@pytest.mark.parametrize("charset", ["bz2_codec", "utf-16"])
def test_a_compressing_or_mismatched_charset_is_refused(api, charset):
    body = json.dumps(call_payload()).encode()  # UTF-8, whatever the header claims
    _assert_refused(_post_raw(api, body, content_type=f"application/json; charset={charset}"))


def test_an_unknown_charset_is_ignored_and_the_body_read_as_utf8(api):
    body = json.dumps(call_payload()).encode()
    assert _post_raw(api, body, content_type="application/json; charset=nope").status_code == 201


def test_a_deep_body_on_an_override_is_refused_too(session_api):
    call = make_call()
    response = session_api.generic(
        "PATCH", f"/api/v1/calls/{call.pk}/", b"[" * 50_000, content_type="application/json"
    )
    assert response.status_code == 400 and "body" in response.json()["error"]["fields"]
