"""The admin: supervisors edit tiers and settings (publishing the config message), admins manage clients."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from triage.models import ApiClient, AuditEvent, SchedulerSettings, Tier

pytestmark = pytest.mark.django_db


def staff_client(user: object) -> Client:
    user.is_staff = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def control_messages(settings: object):
    """Messages published on the control channel during the test (a real Redis subscription)."""
    from triage.redis_clients import redis_bytes_client
    from triage.streams import control_channel

    pubsub = redis_bytes_client().pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)  # the subscribe confirmation

    def read() -> list[dict]:
        out = []
        while (message := pubsub.get_message(timeout=0.5)) is not None:
            if message["type"] == "message":
                out.append(json.loads(message["data"]))
        return out

    yield read
    pubsub.close()


def tier_post_data(tier: Tier, **changes: object) -> dict:
    data = {
        "name": tier.name, "colour": tier.colour, "sort_order": tier.sort_order,
        "esi_levels": json.dumps(tier.esi_levels), "ttft_target_mean_s": tier.ttft_target_mean_s,
        "ttft_target_p90_s": tier.ttft_target_p90_s, "e2e_target_mean_s": tier.e2e_target_mean_s,
        "e2e_target_p90_s": tier.e2e_target_p90_s, "tdg_weight": tier.tdg_weight,
        "max_preemptions": tier.max_preemptions, "reserved_kv_fraction": tier.reserved_kv_fraction,
        "aging_step_s": tier.aging_step_s, "aging_ceiling_level": tier.aging_ceiling_level,
        "tpot_target_s": tier.tpot_target_s, "alert_repeat_s": tier.alert_repeat_s,
        "acknowledge_within_s": tier.acknowledge_within_s,
    }
    data.update(changes)
    return data


def test_supervisor_saving_a_tier_publishes_a_config_message(
    tiers, supervisor, control_messages, django_capture_on_commit_callbacks
):
    client = staff_client(supervisor)
    tier = Tier.objects.get(name="Urgent")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/triage/tier/{tier.pk}/change/", tier_post_data(tier, ttft_target_mean_s=3))
    assert response.status_code == 302, response.content.decode()[:2000]
    tier.refresh_from_db()
    assert tier.ttft_target_mean_s == 3
    version = SchedulerSettings.load().version
    assert {"kind": "config", "version": version} in control_messages()
    assert AuditEvent.objects.filter(action="tier.updated", actor=f"user:{supervisor.username}").exists()


def test_tier_form_rejects_esi_levels_outside_one_to_five(tiers, supervisor):
    client = staff_client(supervisor)
    tier = Tier.objects.get(name="Urgent")
    response = client.post(f"/admin/triage/tier/{tier.pk}/change/", tier_post_data(tier, esi_levels="[7]"))
    assert response.status_code == 200 and "ESI levels from 1 to 5" in response.content.decode()


def test_scheduler_settings_is_a_singleton_edited_in_place(
    supervisor, control_messages, django_capture_on_commit_callbacks
):
    client = staff_client(supervisor)
    response = client.get("/admin/triage/schedulersettings/")
    assert response.status_code == 302 and response["Location"].endswith("/1/change/")
    before = SchedulerSettings.load()
    data = {
        "policy": "semantic", "preempt_on_arrival": "on", "limited_preemption_c": "0.8", "aging_enabled": "on",
        "batch_size": 8, "kv_capacity_blocks": before.kv_capacity_blocks, "block_size": before.block_size,
        "micro_batch_max": before.micro_batch_max, "micro_batch_wait_ms": before.micro_batch_wait_ms,
        "stage_merge": "strict", "lower_prefill_share": "0", "eviction": before.eviction,
    }
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post("/admin/triage/schedulersettings/1/change/", data).status_code == 302
    after = SchedulerSettings.load()
    assert after.batch_size == 8 and after.limited_preemption_c == 0.8 and after.version > before.version
    assert (after.stage_merge, after.lower_prefill_share) == ("strict", 0.0)
    assert after.preempt_within_level is False  # an unticked box
    assert {"kind": "config", "version": after.version} in control_messages()


def test_dispatcher_cannot_open_the_tier_admin(tiers, dispatcher):
    client = staff_client(dispatcher)
    assert client.get("/admin/triage/tier/").status_code == 403


def test_supervisor_cannot_manage_api_clients(supervisor):
    assert staff_client(supervisor).get("/admin/triage/apiclient/").status_code == 403


def test_admin_creates_an_api_client_and_sees_its_token_once(make_user):
    client = staff_client(make_user("ada", "admin"))
    response = client.post(
        "/admin/triage/apiclient/add/", {"name": "cad-north", "scopes": ["calls:write"], "throttle_rate": ""},
        follow=True,
    )
    html = response.content.decode()
    assert "it will not be shown again" in html
    created = ApiClient.objects.get(name="cad-north")
    assert created.scopes == ["calls:write"] and f"trg_{created.token_prefix}_" in html
    again = client.get(f"/admin/triage/apiclient/{created.pk}/change/").content.decode()
    assert f"trg_{created.token_prefix}_" not in again


def test_admin_rotates_and_deactivates_clients_through_actions(make_user, make_api_client):
    api_client, old_token = make_api_client("cad-south")
    client = staff_client(make_user("ada", "admin"))
    response = client.post(
        "/admin/triage/apiclient/", {"action": "rotate_tokens", "_selected_action": [api_client.pk]}, follow=True
    )
    api_client.refresh_from_db()
    assert f"trg_{api_client.token_prefix}_" in response.content.decode()
    assert not old_token.startswith(f"trg_{api_client.token_prefix}_")
    client.post("/admin/triage/apiclient/", {"action": "deactivate_clients", "_selected_action": [api_client.pk]})
    api_client.refresh_from_db()
    assert not api_client.is_active


def test_audit_log_is_read_only_with_filters(make_call, supervisor):
    make_call(3)
    client = staff_client(supervisor)
    listing = client.get("/admin/triage/auditevent/", {"action": "call.created"})
    assert listing.status_code == 200 and "call.created" in listing.content.decode()
    event = AuditEvent.objects.first()
    assert client.get("/admin/triage/auditevent/add/").status_code == 403
    assert client.post(f"/admin/triage/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403


def test_call_updates_are_listed_as_sent_and_read_only(make_call, supervisor):
    from django.utils import timezone

    from triage.services.call_updates import call_update_append

    call = make_call(3)
    update, _ = call_update_append(call=call, update_id="rebid-1", received_at=timezone.now(), actor="system:test",
                                   location_lat=53.81, location_lon=-1.56, location_uncertainty_m=35.0)
    client = staff_client(supervisor)
    listing = client.get("/admin/triage/callupdate/", {"q": "rebid"})
    assert listing.status_code == 200 and "rebid-1" in listing.content.decode()
    assert client.get(f"/admin/triage/callupdate/{update.pk}/change/").status_code == 200
    assert client.get("/admin/triage/callupdate/add/").status_code == 403
    assert client.post(f"/admin/triage/callupdate/{update.pk}/delete/", {"post": "yes"}).status_code == 403


def test_the_admin_lists_the_protocols_and_their_versions_read_only(supervisor):
    from judgment.protocols import load_library

    library = load_library()
    client = staff_client(supervisor)
    assert "/admin/protocols/" in client.get("/admin/").content.decode()
    html = client.get("/admin/protocols/").content.decode()
    assert library.label in html
    assert all(f"<code>{p.id}</code></td><td>{p.version}</td>" in html for p in library.protocols.values())
    assert "<form" not in html.split('id="protocols"')[1]  # nothing to edit here


def test_the_protocol_list_is_for_staff_only(dispatcher):
    response = Client().get("/admin/protocols/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_admin_sets_a_webhook_url_through_the_audited_service(make_user, make_api_client):
    api_client, _ = make_api_client("cad-hooks")
    client = staff_client(make_user("ada", "admin"))
    page = f"/admin/triage/apiclient/{api_client.pk}/change/"
    client.post(page, {"webhook_url": "https://cad.example.org/hooks", "share_weight": 1})
    api_client.refresh_from_db()
    assert api_client.webhook_url == "https://cad.example.org/hooks"
    assert AuditEvent.objects.filter(action="api_client.webhook_set").exists()
    assert api_client.webhook_secret in client.get(page).content.decode()  # the receiver needs it


def test_admin_sets_a_call_systems_fair_share_through_the_audited_service(make_user, make_api_client):
    api_client, _ = make_api_client("cad-share")
    client = staff_client(make_user("ada", "admin"))
    page = f"/admin/triage/apiclient/{api_client.pk}/change/"
    client.post(page, {"webhook_url": "", "share_weight": 3})
    api_client.refresh_from_db()
    assert api_client.share_weight == 3
    assert AuditEvent.objects.filter(action="api_client.share_set", data__share_weight=3).exists()
    assert not AuditEvent.objects.filter(action="api_client.webhook_set").exists()  # unchanged, not re-set


def test_webhook_deliveries_are_listed_read_only(make_user, make_api_client):
    from django.utils import timezone

    from triage.models import WebhookDelivery

    api_client, _ = make_api_client("cad-hooks")
    now = timezone.now()
    delivery = WebhookDelivery.objects.create(
        client=api_client, event_id="2f1c3a8e-6c5d-4a1e-9f0b-3d2c1b0a9e8f", event="call.done", url="https://x.org/",
        attempt=1, outcome="retrying", status_code=500, error="HTTP 500", started_at=now, finished_at=now,
    )
    client = staff_client(make_user("ada", "admin"))
    listing = client.get("/admin/triage/webhookdelivery/")
    assert listing.status_code == 200 and "call.done" in listing.content.decode()
    assert client.get(f"/admin/triage/webhookdelivery/{delivery.pk}/change/").status_code == 200
    assert client.get("/admin/triage/webhookdelivery/add/").status_code == 403
    assert client.post(f"/admin/triage/webhookdelivery/{delivery.pk}/delete/", {"post": "yes"}).status_code == 403
    client.post(f"/admin/triage/webhookdelivery/{delivery.pk}/change/", {"outcome": "delivered"})
    delivery.refresh_from_db()
    assert delivery.outcome == "retrying"


def _editable_fields(model: type) -> set[str]:
    return {f.name for f in model._meta.get_fields() if getattr(f, "editable", False) and not f.auto_created
            and not f.is_relation}


@pytest.mark.parametrize("model, url", [(SchedulerSettings, "/admin/triage/schedulersettings/1/change/"),
                                        (Tier, "/admin/triage/tier/{pk}/change/")])
def test_every_scheduler_setting_says_whether_it_applies_on_vllm_and_the_admin_shows_those_that_do_not(
    model, url, tiers, supervisor
):
    from scheduler.settings_on_vllm import SCHEDULER_SETTINGS, TIER_SETTINGS, not_applying_note

    on_vllm = SCHEDULER_SETTINGS if model is SchedulerSettings else TIER_SETTINGS
    assert set(on_vllm) == _editable_fields(model)  # a new field must be classified before it lands
    SchedulerSettings.load()
    page = staff_client(supervisor).get(url.format(pk=Tier.objects.first().pk)).content.decode()
    for name, entry in on_vllm.items():
        note = not_applying_note(entry)
        shown = f'id="id_{name}_helptext"' in page and note in page.split(f'id="id_{name}_helptext"')[1][:600]
        assert shown == (not entry.applies), name


def test_the_vllm_worker_logs_the_settings_it_does_not_apply_at_start_and_when_one_is_changed(caplog):
    from inference.backends.vllm_pool import VllmPool
    from scheduler.config import SchedulerConfig

    with caplog.at_level("WARNING", logger="inference.vllm_pool"):
        pool = VllmPool(["http://127.0.0.1:9"], model="guidance")
        assert "eviction='cost'" in caplog.text and "reserved_kv_fraction=0.0" in caplog.text
        caplog.clear()
        pool.reconfigure(SchedulerConfig().with_changes(eviction="swap", aging_enabled=False))
    assert "eviction='swap'" in caplog.text and "no swap" in caplog.text
    assert "aging_enabled" not in caplog.text  # honoured: not warned about
