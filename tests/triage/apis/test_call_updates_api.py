"""POST/GET /api/v1/calls/<id>/updates/: a call system appends what it learned; retries are answered with the
stored update, a reused update id with another body is a 409, and bad input names its field."""

import pytest
from django.utils import timezone

from tests.triage.factories import call_payload
from triage.models import AuditEvent, Call

pytestmark = pytest.mark.django_db
URL = "/api/v1/calls/"


@pytest.fixture
def call_id(redis_conn, api):
    return api.post(URL, call_payload(transcript="my neighbour is not well"), format="json").json()["id"]


def _update(**fields):
    return {"update_id": "u1", "received_at": timezone.now().isoformat(), **fields}


def test_an_update_is_stored_applied_and_shown_on_the_call(api, call_id):
    body = _update(narrative="she fell off a ladder", location_lat=53.81, location_lon=-1.56,
                   location_uncertainty_m=35, callback_number="+44 113 000")
    response = api.post(f"{URL}{call_id}/updates/", body, format="json")
    assert response.status_code == 201
    assert response.json()["narrative_revision"] == 1 and response.json()["location_uncertainty_m"] == 35
    call = api.get(f"{URL}{call_id}/").json()
    assert call["transcript"] == "my neighbour is not well\nshe fell off a ladder" and call["narrative_revision"] == 1
    assert (call["location_lat"], call["location_uncertainty_m"], call["caller_phone"]) == (53.81, 35, "+44 113 000")
    listed = api.get(f"{URL}{call_id}/updates/").json()
    assert [u["update_id"] for u in listed] == ["u1"]


def test_a_retried_update_is_200_and_a_changed_one_under_its_id_is_409_naming_the_fields(api, call_id):
    body = _update(narrative="she fell off a ladder")
    first = api.post(f"{URL}{call_id}/updates/", body, format="json")
    again = api.post(f"{URL}{call_id}/updates/", body, format="json")
    changed = api.post(f"{URL}{call_id}/updates/", {**body, "narrative": "she is fine"}, format="json")
    assert (first.status_code, again.status_code, changed.status_code) == (201, 200, 409)
    assert changed.json()["error"]["code"] == "update_id_reused" and list(changed.json()["error"]["fields"]) == ["narrative"]
    assert Call.objects.get(pk=call_id).narrative_revision == 1
    assert AuditEvent.objects.filter(call_id=call_id, action="call.updated").count() == 1


@pytest.mark.parametrize(("body", "field"), [
    (_update(), "narrative"),  # nothing to update
    (_update(location_lat=53.8), "location_lon"),
    (_update(narrative="x", location_uncertainty_m=-1), "location_uncertainty_m"),
    (_update(narrative="x", callback_number="1\n2"), "callback_number"),
    ({"received_at": timezone.now().isoformat(), "narrative": "x"}, "update_id"),
    (_update(narrative="x", colour="red"), "colour"),
])
def test_a_bad_update_is_a_400_naming_the_field(api, call_id, body, field):
    response = api.post(f"{URL}{call_id}/updates/", body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"]
    assert not Call.objects.get(pk=call_id).updates.exists()


def test_another_clients_call_is_404_and_a_cancelled_call_is_409(api, call_id, make_api_client):
    from rest_framework.test import APIClient

    _, token = make_api_client("other-cad")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert other.post(f"{URL}{call_id}/updates/", _update(narrative="x"), format="json").status_code == 404
    api.post(f"{URL}{call_id}/cancel/", {}, format="json")
    response = api.post(f"{URL}{call_id}/updates/", _update(narrative="x"), format="json")
    assert response.status_code == 409
