import pytest

from tests.fixtures.services import logged_in_api
from tests.triage.factories import call_payload, make_call
from triage.models import AuditEvent, Call, CallStatus

pytestmark = pytest.mark.django_db
URL = "/api/v1/calls/"


def test_post_creates_a_received_call_and_returns_201_with_its_location(redis_conn, api):
    response = api.post(URL, call_payload(external_id="CAD-77", location_lat=53.8), format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["external_id"] == "CAD-77" and body["status"] == "received" and body["esi"] is None
    assert response["Location"] == f"{URL}{body['id']}/"
    call = Call.objects.get(pk=body["id"])
    assert call.client.name == "cad-main" and call.location_lat == 53.8


def test_a_retried_post_returns_200_and_the_same_call(redis_conn, api):
    payload = call_payload()
    first = api.post(URL, payload, format="json")
    again = api.post(URL, payload, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Call.objects.count() == 1


def test_a_changed_body_under_a_used_external_id_is_a_409_naming_the_fields(redis_conn, api):
    payload = call_payload()
    first = api.post(URL, payload, format="json").json()
    again = api.post(URL, {**payload, "transcript": "a different text", "caller_phone": "0"}, format="json")
    assert again.status_code == 409
    error = again.json()["error"]
    assert error["code"] == "external_id_reused" and set(error["fields"]) == {"transcript", "caller_phone"}
    assert f"/api/v1/calls/{first['id']}/updates/" in error["message"]
    assert Call.objects.get().transcript == payload["transcript"]


def test_optional_fields_may_be_left_out(redis_conn, api):
    payload = {k: call_payload()[k] for k in ("external_id", "received_at", "transcript")}
    assert api.post(URL, payload, format="json").status_code == 201


def test_get_returns_the_call_with_its_assessment(redis_conn, api, triaged_call):
    body = api.get(f"{URL}{triaged_call.pk}/").json()
    assert body["status"] == "triaged" and body["esi"] == 1
    assert body["assessment"]["predicted_esi"] == 1 and len(body["assessment"]["probabilities"]) == 5
    assert sum(body["assessment"]["probabilities"]) == pytest.approx(1.0, abs=1e-5)
    assert body["assessment"]["override_esi"] is None
    assert body["assessment"]["decision_point"] == "A"
    assert "A: not breathing or no pulse" in body["assessment"]["reasons"]
    assert isinstance(body["assessment"]["uncertain"], bool) and body["assessment"]["catalogue_version"]
    protocol = body["assessment"]["protocol"]
    assert protocol["id"] == triaged_call.assessment.protocol and protocol["library"]
    assert protocol["runner_up"] and protocol["runner_up"] != protocol["likeliest"] and 0 < protocol["confidence"] <= 1


def test_get_of_an_unknown_call_is_404_in_the_error_shape(redis_conn, api):
    response = api.get(f"{URL}999999/")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_list_filters_and_paginates_with_a_cursor(redis_conn, api, client_and_token, triaged_call):
    for _ in range(3):
        make_call(client=client_and_token[0])
    assert [c["id"] for c in api.get(URL, {"esi": 1}).json()["results"]] == [triaged_call.pk]
    assert len(api.get(URL, {"status": ["received", "triaged"]}).json()["results"]) == 4
    assert api.get(URL, {"since": "2999-01-01T00:00:00Z"}).json()["results"] == []
    page = api.get(URL, {"page_size": 3}).json()
    assert len(page["results"]) == 3 and page["next"]
    rest = api.get(page["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None


@pytest.mark.parametrize(("params", "field"), [({"status": "bogus"}, "status"), ({"esi": 9}, "esi"), ({"since": "soon"}, "since"), ({"page_size": 0}, "page_size")])
def test_a_bad_filter_is_named(redis_conn, api, params, field):
    response = api.get(URL, params)
    assert response.status_code == 400
    assert [name for name in response.json()["error"]["fields"] if name.split(".")[0] == field]


def test_a_dispatcher_overrides_the_esi_with_a_reason(redis_conn, session_api, triaged_call):
    response = session_api.patch(f"{URL}{triaged_call.pk}/", {"esi": 3, "reason": "breathing and talking now"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["esi"] == 3 and body["assessment"]["override_esi"] == 3
    assert body["assessment"]["overridden_by"] == "dora" and body["assessment"]["predicted_esi"] == 1


def test_an_override_records_which_reason_the_dispatcher_disputes(redis_conn, session_api, triaged_call):
    disputed = triaged_call.assessment.reasons[0]
    response = session_api.patch(
        f"{URL}{triaged_call.pk}/", {"esi": 2, "reason": "he is breathing, I can hear him", "disputed_reason": disputed},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["assessment"]["override_disputed_reason"] == disputed
    event = AuditEvent.objects.get(call=triaged_call, action="call.level_overridden")
    assert (event.data["disputed_reason"], event.data["decision_point"]) == (disputed, "A")


def test_a_disputed_reason_that_is_not_the_assessments_is_refused_by_name(redis_conn, session_api, triaged_call):
    response = session_api.patch(
        f"{URL}{triaged_call.pk}/", {"esi": 2, "reason": "r", "disputed_reason": "B: something else"}, format="json"
    )
    assert response.status_code == 400 and "disputed_reason" in response.json()["error"]["fields"]
    triaged_call.refresh_from_db()
    assert triaged_call.level == 1 and triaged_call.assessment.override_esi is None


def test_a_dispatcher_switches_the_protocol_and_the_guidance_is_generated_again(redis_conn, session_api, triaged_call):
    response = session_api.patch(f"{URL}{triaged_call.pk}/", {"protocol": "choking"}, format="json")
    assert response.status_code == 200, response.content
    protocol = response.json()["assessment"]["protocol"]
    assert (protocol["id"], protocol["family"], protocol["switched_by"]) == ("choking", "cardiorespiratory", "dora")
    assert response.json()["esi"] == 1  # the level is the call's, not the protocol's
    event = AuditEvent.objects.get(call=triaged_call, action="call.protocol_switched")
    assert event.data["to"] == "choking" and event.data["generation"] == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"protocol": "no_such_protocol"}, "protocol"), ({}, "protocol"), ({"esi": 2}, "reason"), ({"reason": "r"}, "esi"),
])
def test_a_patch_without_a_valid_change_is_refused_by_name(redis_conn, session_api, triaged_call, body, field):
    response = session_api.patch(f"{URL}{triaged_call.pk}/", body, format="json")
    assert response.status_code == 400 and field in response.json()["error"]["fields"], response.content
    triaged_call.refresh_from_db()
    assert triaged_call.level == 1 and triaged_call.guidance_generation == 0


def test_overriding_an_untriaged_call_is_a_409(redis_conn, session_api, client_and_token):
    call = make_call(client=client_and_token[0])
    response = session_api.patch(f"{URL}{call.pk}/", {"esi": 1, "reason": "r"}, format="json")
    assert response.status_code == 409 and "esi" in response.json()["error"]["fields"]


def test_the_posting_client_cancels_its_call_once(redis_conn, api, client_and_token):
    call = make_call(client=client_and_token[0])
    response = api.post(f"{URL}{call.pk}/cancel/", {"reason": "duplicate"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = api.post(f"{URL}{call.pk}/cancel/", {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_transition"
    assert AuditEvent.objects.get(call=call, action="call.cancelled").actor == "client:cad-main"


def test_a_dispatcher_cancels_a_call(redis_conn, dispatcher, triaged_call):
    response = logged_in_api(dispatcher).post(f"{URL}{triaged_call.pk}/cancel/", {}, format="json")
    assert response.status_code == 200
    assert AuditEvent.objects.get(call=triaged_call, action="call.cancelled").actor == "user:dora"


def test_the_schema_and_docs_are_served(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"/api/v1/calls/" in schema.content
    assert client.get("/api/docs/").status_code == 200


def test_a_failed_call_is_retried_once_at_its_place_and_other_calls_are_refused(redis_conn, api, dispatcher, triaged_call):
    """A call whose generation kept failing: the posting client (or a dispatcher) puts it back in the queue."""
    from tests.fixtures.services import stream_entries
    from triage.models import CallStatus
    from triage.services.calls import call_transition

    refused = api.post(f"{URL}{triaged_call.pk}/retry/")
    assert refused.status_code == 409 and refused.json()["error"]["fields"]["status"] == ["call is triaged"]
    for status in (CallStatus.QUEUED, CallStatus.DECODING):
        call_transition(call=triaged_call, to_status=status, actor="system:test")
    call_transition(call=triaged_call, to_status=CallStatus.FAILED, actor="system:test",
                    updates={"failure_reason": "RuntimeError: CUDA out of memory"})

    response = api.post(f"{URL}{triaged_call.pk}/retry/")
    assert response.status_code == 200 and response.json()["status"] == "queued"
    triaged_call.refresh_from_db()
    assert triaged_call.failure_reason == "" and triaged_call.level == 1
    assert [int(e["call_id"]) for e in stream_entries(redis_conn)] == [triaged_call.pk]
    event = AuditEvent.objects.filter(call=triaged_call, to_status="queued").latest("created_at")
    assert event.actor == "client:cad-main" and event.data == {"reason": "retried"}
    assert logged_in_api(dispatcher).post(f"{URL}{triaged_call.pk}/retry/").status_code == 409


# --- the public lifecycle and reconciling after missed events ------------------------------------------------


def test_every_engine_state_has_one_public_lifecycle_stage_and_a_closed_call_is_closed():
    from triage.call_status import LIFECYCLE_OF_STATUS, Lifecycle, lifecycle_of, statuses_of

    assert set(LIFECYCLE_OF_STATUS) == set(CallStatus.values)
    assert lifecycle_of(CallStatus.PREEMPTED, closed=False) == Lifecycle.GUIDANCE_STREAMING
    assert lifecycle_of(CallStatus.QUEUED, closed=False) == Lifecycle.TRIAGED
    assert lifecycle_of(CallStatus.DONE, closed=True) == Lifecycle.CLOSED
    assert sorted(statuses_of(Lifecycle.GUIDANCE_STREAMING)) == ["decoding", "preempted", "prefilling"]


@pytest.mark.django_db
def test_the_api_reports_the_lifecycle_beside_the_engine_state_and_filters_by_it(api, client_and_token):
    from triage.services.calls import call_transition

    waiting = make_call(client=client_and_token[0])
    streaming = make_call(client=client_and_token[0])
    for step in (CallStatus.TRIAGED, CallStatus.QUEUED, CallStatus.DECODING, CallStatus.PREEMPTED):
        call_transition(call=streaming, to_status=step, actor="system:test")
    detail = api.get(f"/api/v1/calls/{streaming.pk}/").json()
    assert (detail["lifecycle"], detail["status"]) == ("guidance_streaming", "preempted")
    listed = api.get("/api/v1/calls/", {"lifecycle": ["guidance_streaming"]}).json()["results"]
    assert [c["id"] for c in listed] == [streaming.pk]
    assert [c["id"] for c in api.get("/api/v1/calls/", {"lifecycle": "received"}).json()["results"]] == [waiting.pk]
    refused = api.get("/api/v1/calls/", {"lifecycle": "decoding"})
    assert refused.status_code == 400 and "lifecycle.0" in refused.json()["error"]["fields"]


@pytest.mark.django_db
def test_updated_since_returns_the_calls_created_or_changed_since_for_a_client_that_missed_events(
        api, client_and_token):
    from django.utils import timezone

    from triage.services.calls import call_transition

    old, changed = make_call(client=client_and_token[0]), make_call(client=client_and_token[0])
    mark = timezone.now()  # what the client saw last; then one call changes and another arrives
    assert old.created_at < mark and AuditEvent.objects.filter(call=changed, created_at__gte=mark).count() == 0
    call_transition(call=changed, to_status=CallStatus.TRIAGED, actor="system:test")
    new = make_call(client=client_and_token[0])
    answer = api.get("/api/v1/calls/", {"updated_since": mark.isoformat()}).json()["results"]
    assert sorted(c["id"] for c in answer) == sorted([changed.pk, new.pk])
