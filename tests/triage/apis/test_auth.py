"""The auth matrix: 401 without a valid token, 403 for a wrong scope or role, 429 from per-client throttling."""

import pytest
from rest_framework.test import APIClient

from tests.fixtures.services import logged_in_api
from tests.triage.factories import call_payload, make_call
from triage.models import Call
from triage.services.clients import api_client_deactivate

pytestmark = pytest.mark.django_db
URL = "/api/v1/calls/"


def _bearer(token):
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return http


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer trg_00000000_nope", "Bearer not-a-token", "Bearer a b", "Token abc", "Basic dXNlcjpwYXNz"],
)
def test_a_request_without_a_valid_token_gets_401(redis_conn, authorization):
    http = APIClient()
    if authorization:
        http.credentials(HTTP_AUTHORIZATION=authorization)
    response = http.post(URL, call_payload(), format="json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] in {"not_authenticated", "authentication_failed"}
    assert Call.objects.count() == 0


def test_a_deactivated_client_gets_401(redis_conn, client_and_token):
    api_client_deactivate(client=client_and_token[0], actor="system:test")
    assert _bearer(client_and_token[1]).post(URL, call_payload(), format="json").status_code == 401


def test_posting_needs_the_write_scope(redis_conn, make_api_client):
    _, token = make_api_client(scopes=["calls:read"])
    response = _bearer(token).post(URL, call_payload(), format="json")
    assert response.status_code == 403 and "calls:write" in response.json()["error"]["message"]
    assert Call.objects.count() == 0


def test_reading_needs_the_read_scope(redis_conn, make_api_client):
    client, token = make_api_client(scopes=["calls:write"])
    call = make_call(client=client)
    assert _bearer(token).get(URL).status_code == 403
    assert _bearer(token).get(f"{URL}{call.pk}/").status_code == 403


def test_a_client_cannot_see_another_clients_call(redis_conn, make_api_client):
    owner, _ = make_api_client()
    _, other_token = make_api_client()
    call = make_call(client=owner)
    assert _bearer(other_token).get(f"{URL}{call.pk}/").status_code == 404
    assert _bearer(other_token).post(f"{URL}{call.pk}/cancel/", {}, format="json").status_code == 404


def test_an_api_client_may_not_override_an_esi(redis_conn, api, triaged_call):
    response = api.patch(f"{URL}{triaged_call.pk}/", {"esi": 1, "reason": "r"}, format="json")
    assert response.status_code == 403


def test_a_user_without_a_role_may_not_read_or_override(redis_conn, make_user, triaged_call):
    http = logged_in_api(make_user("nobody"))
    assert http.get(URL).status_code == 403
    assert http.patch(f"{URL}{triaged_call.pk}/", {"esi": 1, "reason": "r"}, format="json").status_code == 403


def test_an_admin_may_read_but_not_override(redis_conn, make_user, triaged_call):
    http = logged_in_api(make_user("ada", "admin"))
    assert http.get(f"{URL}{triaged_call.pk}/").status_code == 200
    assert http.patch(f"{URL}{triaged_call.pk}/", {"esi": 1, "reason": "r"}, format="json").status_code == 403


def test_a_dispatcher_session_may_not_post_calls(redis_conn, session_api):
    assert session_api.post(URL, call_payload(), format="json").status_code == 403


def test_a_dispatcher_session_without_the_csrf_token_is_refused(redis_conn, dispatcher, triaged_call):
    http = logged_in_api(dispatcher, csrf=False)
    response = http.patch(f"{URL}{triaged_call.pk}/", {"esi": 1, "reason": "r"}, format="json")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]


def test_the_throttle_answers_429_per_client_with_retry_after(redis_conn, make_api_client):
    _, slow_token = make_api_client(rate="3/hour")
    _, other_token = make_api_client(rate="3/hour")
    slow = _bearer(slow_token)
    statuses = [slow.post(URL, call_payload(), format="json").status_code for _ in range(4)]
    assert statuses == [201, 201, 201, 429]
    refused = slow.post(URL, call_payload(), format="json")
    assert refused.json()["error"]["code"] == "throttled" and int(refused["Retry-After"]) >= 1
    assert _bearer(other_token).post(URL, call_payload(), format="json").status_code == 201
    assert Call.objects.count() == 4


def test_the_default_intake_rate_comes_from_settings(redis_conn, api, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"intake": "2/hour"}}
    statuses = [api.get(URL).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]


def test_a_token_used_before_deactivation_is_refused_once_the_cache_expires(redis_conn, client_and_token, settings):
    settings.TRIAGE = {**settings.TRIAGE, "API_TOKEN_CACHE_S": 0}
    http = _bearer(client_and_token[1])
    assert http.get(URL).status_code == 200
    api_client_deactivate(client=client_and_token[0], actor="system:test")
    assert http.get(URL).status_code == 401
