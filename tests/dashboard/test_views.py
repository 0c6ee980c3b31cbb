"""Board pages and actions: login, roles, CSRF, audit rows naming the actor."""

from __future__ import annotations

import pytest
from django.test import Client

from triage.models import AuditEvent, CallStatus

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("board_redis", "redis_conn")]


def csrf_client(user: object) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def csrf_token(client: Client) -> str:
    client.get("/")
    return client.cookies["csrftoken"].value


def test_anonymous_visitor_is_sent_to_login():
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/")


def test_login_page_renders_a_labelled_form():
    html = Client().get("/accounts/login/").content.decode()
    assert '<label for="id_username">' in html and '<label for="id_password">' in html


def test_dispatcher_sees_the_board_with_its_socket_module(dispatcher):
    client = Client()
    client.force_login(dispatcher)
    html = client.get("/").content.decode()
    assert 'data-ws-path="/ws/dashboard/"' in html
    assert "js/board.js" in html and "htmx-2.0.11.min.js" in html


def test_user_without_a_role_is_forbidden_the_board(make_user):
    client = Client()
    client.force_login(make_user("visitor"))
    assert client.get("/").status_code == 403


def test_override_without_csrf_token_is_refused(make_call, dispatcher):
    call = make_call(4)
    response = csrf_client(dispatcher).post(f"/calls/{call.pk}/override/", {"level": 1, "reason": "worse"})
    assert response.status_code == 403
    call.refresh_from_db()
    assert call.level == 4


def test_override_by_htmx_changes_the_level_and_audits_the_dispatcher(make_call, dispatcher):
    call = make_call(4)
    client = csrf_client(dispatcher)
    response = client.post(
        f"/calls/{call.pk}/override/", {"level": 1, "reason": "caller stopped breathing"},
        HTTP_X_CSRFTOKEN=csrf_token(client), HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert "is now ESI 1" in response.content.decode()
    call.refresh_from_db()
    assert call.level == 1
    audit = AuditEvent.objects.filter(call=call, action="call.level_overridden").get()
    assert audit.actor == f"user:{dispatcher.username}" and audit.actor_user == dispatcher


def test_an_uncertain_call_is_shown_held_and_one_post_confirms_the_verdicts_level(make_call, dispatcher):
    call = make_call(4, uncertain_against=2)
    call.refresh_from_db()
    assert call.level == 2  # held at the more urgent level
    client = csrf_client(dispatcher)
    panel = client.get(f"/calls/{call.pk}/panel/").content.decode()
    assert "between ESI 4 and ESI 2: held at ESI 2 until confirmed" in panel
    assert 'aria-keyshortcuts="v"' in panel and "Confirm ESI 4" in panel
    response = client.post(f"/calls/{call.pk}/confirm-level/", {"level": 4},
                           HTTP_X_CSRFTOKEN=csrf_token(client), HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "ESI 4 confirmed" in response.content.decode()
    call.refresh_from_db()
    assert call.level == 4
    panel = client.get(f"/calls/{call.pk}/panel/").content.decode()
    assert "ESI 4 confirmed by dora" in panel and "Confirm ESI" not in panel
    refused = client.post(f"/calls/{call.pk}/confirm-level/", {"level": 4},
                          HTTP_X_CSRFTOKEN=csrf_token(client), HTTP_HX_REQUEST="true")
    assert refused.status_code == 409


def test_override_without_a_reason_is_rejected_with_the_reason_named(make_call, dispatcher):
    call = make_call(4)
    client = csrf_client(dispatcher)
    response = client.post(
        f"/calls/{call.pk}/override/", {"level": 1, "reason": "  "},
        HTTP_X_CSRFTOKEN=csrf_token(client), HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 400
    assert "Reason" in response.content.decode()
    call.refresh_from_db()
    assert call.level == 4


def test_acknowledge_records_who_and_is_idempotent(make_call, dispatcher):
    call = make_call(2)
    client = csrf_client(dispatcher)
    token = csrf_token(client)
    for _ in range(2):
        assert client.post(f"/calls/{call.pk}/acknowledge/", HTTP_X_CSRFTOKEN=token).status_code == 302
    call.refresh_from_db()
    assert call.acknowledged_by == dispatcher and call.acknowledged_at is not None
    assert AuditEvent.objects.filter(call=call, action="call.acknowledged").count() == 1


def test_close_needs_a_finished_call_and_an_outcome(make_call, dispatcher):
    active, done = make_call(3), make_call(3, CallStatus.DONE)
    client = csrf_client(dispatcher)
    token = csrf_token(client)
    headers = {"HTTP_X_CSRFTOKEN": token, "HTTP_HX_REQUEST": "true"}
    assert client.post(f"/calls/{active.pk}/close/", {"outcome": "Advice given"}, **headers).status_code == 409
    assert client.post(f"/calls/{done.pk}/close/", {"outcome": ""}, **headers).status_code == 400
    assert client.post(f"/calls/{done.pk}/close/", {"outcome": "Advice given"}, **headers).status_code == 200
    done.refresh_from_db()
    assert done.closed_at is not None and done.outcome == "Advice given"
    assert AuditEvent.objects.get(call=done, action="call.closed").actor == f"user:{dispatcher.username}"


def test_cancel_stops_an_active_call(make_call, dispatcher):
    call = make_call(5)
    client = csrf_client(dispatcher)
    response = client.post(f"/calls/{call.pk}/cancel/", {"reason": "duplicate"}, HTTP_X_CSRFTOKEN=csrf_token(client))
    assert response.status_code == 302
    call.refresh_from_db()
    assert call.status == CallStatus.CANCELLED


def test_admin_role_without_dispatch_role_cannot_act(make_call, make_user):
    call = make_call(4)
    client = csrf_client(make_user("ada", "admin"))
    response = client.post(
        f"/calls/{call.pk}/override/", {"level": 1, "reason": "x"}, HTTP_X_CSRFTOKEN=csrf_token(client)
    )
    assert response.status_code == 403


def test_closed_calls_leave_the_board_and_are_found_by_search(make_call, dispatcher):
    from triage.selectors.queue import queue_snapshot
    from triage.services.board import call_close

    call = make_call(2, CallStatus.DONE, text="Chest pain in the garden centre")
    call_close(call=call, user=dispatcher, outcome="Ambulance dispatched")
    assert call.pk not in [c["id"] for c in queue_snapshot(with_metrics=False)["calls"]]
    client = Client()
    client.force_login(dispatcher)
    html = client.get("/calls/", {"q": "garden centre", "closed": "yes"}).content.decode()
    assert f"#{call.pk}" in html and "Ambulance dispatched" in html


def test_call_detail_shows_the_audit_trail(make_call, dispatcher):
    call = make_call(3, CallStatus.DONE)
    client = Client()
    client.force_login(dispatcher)
    html = client.get(f"/calls/{call.pk}/").content.decode()
    assert "call.created" in html and "call.done" in html and "Check breathing." in html


def test_panel_fragment_offers_only_the_actions_that_apply(make_call, dispatcher):
    client = Client()
    client.force_login(dispatcher)
    active = client.get(f"/calls/{make_call(3).pk}/panel/").content.decode()
    assert 'data-action="override"' in active and 'data-action="cancel"' in active
    assert 'data-action="close"' not in active
    done = client.get(f"/calls/{make_call(3, CallStatus.DONE).pk}/panel/").content.decode()
    assert 'data-action="close"' in done and 'data-action="cancel"' not in done


def test_queue_snapshot_sorts_by_level_then_waiting_time(make_call):
    from triage.selectors.queue import queue_snapshot

    first_three, urgent, second_three = make_call(3), make_call(1), make_call(3)
    ids = [c["id"] for c in queue_snapshot(with_metrics=False)["calls"]]
    assert ids == [urgent.pk, first_three.pk, second_three.pk]


def test_metrics_report_waiting_percentiles_per_level_and_slo_attainment(make_call, board_redis):
    from triage.redis_clients import ENGINE_METRICS_KEY
    from triage.selectors.queue import board_metrics

    for _ in range(3):
        make_call(2, CallStatus.DONE)
    board_redis.hset(ENGINE_METRICS_KEY, mapping={"kv_use": 0.42, "tokens_per_s": 812.5, "surge_protect": 1,
                                                  "updated_at": 9e12})
    metrics = board_metrics()
    assert metrics["waiting_s"]["2"]["n"] == 3 and metrics["waiting_s"]["2"]["p90"] is not None
    assert metrics["ttft_s"]["n"] == 3
    emergent = next(s for s in metrics["slo"] if s["name"] == "Emergent")
    assert emergent["n"] == 3 and emergent["attained"] == 1.0
    assert metrics["kv_use"] == 0.42 and metrics["tokens_per_s"] == 812.5
    assert metrics["surge_protect"] is True  # the board shows the centre's mode


def test_seed_demo_users_creates_one_user_per_role():
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from triage.roles import is_admin, is_dispatcher, is_supervisor

    call_command("seed_demo_users", "--password", "pw-demo-123")
    assert is_dispatcher(User.objects.get(username="dispatcher"))
    assert is_supervisor(User.objects.get(username="supervisor"))
    assert is_admin(User.objects.get(username="admin"))
    response = Client().post("/accounts/login/", {"username": "dispatcher", "password": "pw-demo-123"})
    assert response.status_code == 302 and response["Location"] == "/"


def test_the_panel_shows_the_decision_point_and_reasons_and_offers_them_to_dispute(make_call, dispatcher):
    call = make_call(1, text="My husband has collapsed, he's not breathing and I can't feel a pulse")
    client = Client()
    client.force_login(dispatcher)
    html = client.get(f"/calls/{call.pk}/panel/").content.decode()
    assert "decision point A" in html and "<li>A: not breathing or no pulse</li>" in html
    assert '<option value="A: not breathing or no pulse">' in html  # the override dialog's disputed reason


def test_the_board_state_carries_the_decision_point_reasons_and_uncertainty(make_call):
    from triage.selectors.queue import call_state

    state = call_state(make_call(1, text="My husband has collapsed, he's not breathing and I can't feel a pulse"))
    assert state["decision_point"] == "A" and "A: not breathing or no pulse" in state["reasons"]
    assert state["uncertain"] in (True, False)


def test_the_panel_and_board_state_show_the_selected_protocol_with_confidence_and_runner_up(make_call, dispatcher):
    from triage.selectors.queue import call_state

    call = make_call(1, text="My husband has collapsed, he's not breathing and I can't feel a pulse")
    assessment = call.assessment
    protocol = call_state(call)["protocol"]
    assert protocol["id"] == assessment.protocol and protocol["runner_up"] == assessment.protocol_runner_up
    assert protocol["confidence"] == assessment.protocol_confidence and protocol["title"] and protocol["runner_up_title"]
    client = Client()
    client.force_login(dispatcher)
    html = client.get(f"/calls/{call.pk}/panel/").content.decode()
    shown = f"{protocol['title']} ({assessment.protocol_confidence:.2f}) · also: {protocol['runner_up_title']}"
    assert "<dt>Protocol</dt>" in html and shown in html


def test_a_failed_call_shows_its_reason_and_a_retry_that_queues_it_again(make_call, dispatcher):
    from triage.services.calls import call_transition

    call = make_call(2, CallStatus.DECODING)
    call_transition(call=call, to_status=CallStatus.FAILED, actor="system:inference",
                    updates={"failure_reason": "RuntimeError: CUDA out of memory"})
    client = csrf_client(dispatcher)
    panel = client.get(f"/calls/{call.pk}/panel/").content.decode()
    assert 'data-action="retry"' in panel and "CUDA out of memory" in panel
    headers = {"HTTP_X_CSRFTOKEN": csrf_token(client), "HTTP_HX_REQUEST": "true"}
    response = client.post(f"/calls/{call.pk}/retry/", **headers)
    assert response.status_code == 200 and "generated again" in response.content.decode()
    call.refresh_from_db()
    assert call.status == CallStatus.QUEUED and call.level == 2
    assert client.post(f"/calls/{call.pk}/retry/", **headers).status_code == 409
    assert 'data-action="retry"' not in client.get(f"/calls/{call.pk}/panel/").content.decode()


def test_the_boards_slo_attainment_is_the_simulators_for_the_same_calls(make_call, board_redis):
    import datetime as dt

    from scheduler.metrics import RequestOutcome, slo_targets, summarise
    from triage.models import Call, Tier
    from triage.selectors.queue import board_metrics

    tier = Tier.objects.get(name="Emergent")
    ttft_target_s, e2e_target_s = slo_targets(tier.policy())
    # Within target; late first token; late completion; late within the p90 targets, so counted as missed.
    timings = [(0.5 * ttft_target_s, 0.5 * e2e_target_s), (1.5 * ttft_target_s, 0.5 * e2e_target_s),
               (0.5 * ttft_target_s, 1.5 * e2e_target_s), (1.1 * ttft_target_s, 1.1 * e2e_target_s)]
    outcomes = []
    for ttft_s, e2e_s in timings:
        call = make_call(2, CallStatus.DONE)
        Call.objects.filter(pk=call.pk).update(tier=tier, first_token_at=call.created_at + dt.timedelta(seconds=ttft_s),
                                               done_at=call.created_at + dt.timedelta(seconds=e2e_s))
        outcomes.append(RequestOutcome(esi=2, arrival_s=0.0, first_token_s=ttft_s, finish_s=e2e_s, output_tokens=3,
                                       preemptions=0, ttft_target_s=ttft_target_s, e2e_target_s=e2e_target_s))
    emergent = next(s for s in board_metrics()["slo"] if s["name"] == "Emergent")
    assert emergent["n"] == 4
    assert emergent["attained"] == summarise(outcomes)["slo_attainment"] == 0.25


def test_the_panel_shows_when_the_call_system_answered_the_call_in_the_centres_time_zone(dispatcher, settings):
    """TRIAGE_TIME_ZONE: a Chicago centre reads 20:14 CST for a call answered at 02:14 UTC, not 02:14."""
    from datetime import UTC, datetime

    from tests.triage.factories import make_call
    from triage.models import Call

    settings.TIME_ZONE = "America/Chicago"
    call = make_call()
    Call.objects.filter(pk=call.pk).update(received_at=datetime(2026, 11, 28, 2, 14, 5, tzinfo=UTC))
    client = Client()
    client.force_login(dispatcher)
    panel = client.get(f"/calls/{call.pk}/panel/").content.decode()
    assert ">20:14:05 CST<" in panel and ">02:14:05" not in panel  # shown in local time (the attribute stays ISO)


def test_an_unknown_time_zone_is_refused_at_start():
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRIAGE_TIME_ZONE": "Mars/Olympus", "DJANGO_SECRET_KEY": "x" * 50,
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0 and "TRIAGE_TIME_ZONE='Mars/Olympus' is not a time zone" in result.stderr
