"""The dispatch-priority table (issue 33, item 2): the centre's priority code, response mode and units for a call,
from its ESI level narrowed by decision point and protocol; edited in the admin (audited), shipped with a default,
returned by the API, in every webhook event and on the board."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from tests.triage.factories import make_call
from triage.dispatch_priority import DispatchPriorityTable
from triage.models import AuditEvent, DispatchPriorityRule, TriageAssessment
from triage.selectors.dispatch_priorities import call_dispatch_priority
from triage.selectors.queue import call_state
from triage.services.webhooks import webhook_payload

pytestmark = pytest.mark.django_db
DEFAULTS = "fixtures/default_dispatch_priorities.json"


def _rule(level: int, code: str, *, decision_point: str = "", protocol: str = "", mode: str = "hot",
          units: list | None = None) -> DispatchPriorityRule:
    return DispatchPriorityRule.objects.create(
        esi_level=level, decision_point=decision_point, protocol=protocol, priority_code=code, response_mode=mode,
        resources=units if units is not None else [{"unit": "ALS", "count": 1, "lights_and_sirens": True}])


def _assessed(level: int, *, decision_point: str = "B", protocol: str = "chest_pain", override: int | None = None):
    call = make_call()
    TriageAssessment.objects.create(
        call=call, predicted_esi=level, probabilities=[0.2] * 5, predicted_output_tokens=40, model_version="test",
        latency_ms=1, decision_point=decision_point, protocol=protocol, override_esi=override)
    call.level = override or level
    call.save(update_fields=["level"])
    return call


def test_the_most_specific_rule_wins_then_the_level_alone():
    rules = [_rule(2, "2"), _rule(2, "2B", decision_point="B"), _rule(2, "2-chest", protocol="chest_pain"),
             _rule(2, "2B-chest", decision_point="B", protocol="chest_pain")]
    table = DispatchPriorityTable(rules)
    assert table.match(level=2, decision_point="B", protocol="chest_pain").priority_code == "2B-chest"
    assert table.match(level=2, decision_point="D", protocol="chest_pain").priority_code == "2-chest"
    assert table.match(level=2, decision_point="B", protocol="stroke").priority_code == "2B"
    assert table.match(level=2, decision_point="A", protocol="stroke").priority_code == "2"
    assert table.match(level=3, decision_point="B", protocol="chest_pain") is None  # no rule for the level
    assert table.match(level=None) is None  # not triaged yet


def test_a_dispatchers_override_keeps_the_protocol_but_drops_the_decision_point_that_no_longer_set_the_level():
    _rule(1, "1")
    _rule(1, "1A", decision_point="A")
    overridden = _assessed(3, decision_point="A", override=1)
    assert call_dispatch_priority(overridden).priority_code == "1"
    assert call_dispatch_priority(_assessed(1, decision_point="A")).priority_code == "1A"


def test_the_shipped_default_covers_every_level_validates_and_names_only_protocols_of_the_library():
    call_command("loaddata", DEFAULTS, verbosity=0)
    rules = list(DispatchPriorityRule.objects.all())
    for rule in rules:
        rule.full_clean()
        assert rule.note, rule
    assert {r.esi_level for r in rules if not r.decision_point and not r.protocol} == {1, 2, 3, 4, 5}
    table = DispatchPriorityTable(rules)
    arrest = table.match(level=1, decision_point="A", protocol="cardiac_arrest")
    assert arrest.response_mode == "hot" and any("AED" in r.unit for r in arrest.resources)
    assert table.match(level=5).response_mode == "none" and table.match(level=5).resources == ()


@pytest.mark.parametrize("units, message", [
    ({"unit": "ALS"}, "A list of units"),
    ([{"unit": "ALS", "count": 0, "lights_and_sirens": True}], "count is a whole number"),
    ([{"unit": "", "count": 1, "lights_and_sirens": True}], "unit is a name"),
    ([{"unit": "ALS", "count": 1, "lights_and_sirens": "yes"}], "lights_and_sirens is true or false"),
    ([{"unit": "ALS", "count": 1}], "exactly the keys"),
])
def test_a_malformed_unit_list_is_refused_naming_what_is_wrong(units, message):
    rule = DispatchPriorityRule(esi_level=2, priority_code="2", response_mode="hot", resources=units)
    with pytest.raises(ValidationError, match=message):
        rule.full_clean()


def test_a_protocol_outside_the_library_is_refused():
    rule = DispatchPriorityRule(esi_level=2, protocol="heart_attack", priority_code="2", response_mode="hot")
    with pytest.raises(ValidationError, match="not a protocol of the library"):
        rule.full_clean()


def test_the_api_the_events_and_the_board_carry_the_calls_dispatch_priority(api, client_and_token):
    _rule(2, "Echo", units=[{"unit": "ALS", "count": 1, "lights_and_sirens": True},
                            {"unit": "fire/rescue", "count": 2, "lights_and_sirens": False}])
    call = _assessed(2)
    call.client = client_and_token[0]
    call.save(update_fields=["client"])
    expected = {"priority_code": "Echo", "response_mode": "hot", "note": "",
                "resources": [{"unit": "ALS", "count": 1, "lights_and_sirens": True},
                              {"unit": "fire/rescue", "count": 2, "lights_and_sirens": False}]}

    detail = api.get(f"/api/v1/calls/{call.pk}/").json()["dispatch_priority"]
    assert {k: v for k, v in detail.items() if k != "rule_id"} == expected
    listed = api.get("/api/v1/calls/").json()["results"]
    assert [c["dispatch_priority"]["priority_code"] for c in listed if c["id"] == call.pk] == ["Echo"]
    event = webhook_payload(call=call, event="call.triaged", event_id=str(uuid.uuid4()), occurred_at=datetime.now(UTC))
    assert event["call"]["dispatch_priority"] == detail
    assert call_state(call)["dispatch_priority"] == detail

    untriaged = make_call(client=client_and_token[0])
    assert api.get(f"/api/v1/calls/{untriaged.pk}/").json()["dispatch_priority"] is None


def test_the_schema_declares_the_dispatch_priority(api):
    schema = api.get("/api/schema/?format=json").json()
    fields = schema["components"]["schemas"]["DispatchPriorityOutput"]["properties"]
    assert {"priority_code", "response_mode", "resources", "rule_id", "note"} <= set(fields)


def test_a_supervisor_edits_a_rule_in_the_admin_and_the_change_is_audited(supervisor, client):
    client.force_login(supervisor)
    supervisor.is_staff = True
    supervisor.save(update_fields=["is_staff"])
    units = [{"unit": "BLS", "count": 1, "lights_and_sirens": False}]
    data = {"esi_level": 3, "decision_point": "", "protocol": "fall", "priority_code": "3F", "response_mode": "cold",
            "resources": json.dumps(units), "note": "falls: a basic unit"}
    response = client.post("/admin/triage/dispatchpriorityrule/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    rule = DispatchPriorityRule.objects.get(priority_code="3F")
    assert rule.resources == units
    audit = AuditEvent.objects.get(action="dispatch_rule.saved")
    assert audit.actor == f"user:{supervisor.username}" and audit.data["priority_code"] == "3F"

    bad = client.post("/admin/triage/dispatchpriorityrule/add/", {**data, "priority_code": "3G", "resources": "[{}]"})
    assert bad.status_code == 200 and "exactly the keys" in bad.content.decode()
    assert not DispatchPriorityRule.objects.filter(priority_code="3G").exists()
