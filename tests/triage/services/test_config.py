import json

import pytest

from triage.models import AuditEvent, SchedulerSettings, Tier
from triage.services.config import scheduler_settings_update, tier_create, tier_delete, tier_update
from triage.services.errors import DomainError
from triage.streams import control_channel

pytestmark = pytest.mark.django_db

TIER = {
    "name": "Immediate", "esi_levels": [1], "ttft_target_mean_s": 0.5, "ttft_target_p90_s": 1,
    "e2e_target_mean_s": 10, "e2e_target_p90_s": 20, "tdg_weight": 16,
}


def test_each_config_change_bumps_the_version_and_publishes_it(redis_conn, admin_user, django_capture_on_commit_callbacks):
    pubsub = redis_conn.pubsub()
    pubsub.subscribe(control_channel())
    pubsub.get_message(timeout=1)
    start = SchedulerSettings.load().version
    with django_capture_on_commit_callbacks(execute=True):
        settings = scheduler_settings_update(actor=admin_user, batch_size=8, policy="fcfs")
        tier = tier_create(actor=admin_user, **TIER)
        tier_update(tier=tier, actor=admin_user, tdg_weight=20)
        tier_delete(tier=tier, actor=admin_user)
    versions = [json.loads(pubsub.get_message(timeout=2)["data"])["version"] for _ in range(4)]
    pubsub.close()
    assert versions == [start + 1, start + 2, start + 3, start + 4]
    assert settings.batch_size == 8 and SchedulerSettings.load().policy == "fcfs"
    assert not Tier.objects.exists()
    assert AuditEvent.objects.filter(action__startswith="tier.").count() == 3


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"batch_size": 0}, "batch_size"), ({"policy": "random"}, "policy"), ({"colour": "x"}, "colour"),
        ({"stage_merge": "eager"}, "stage_merge"), ({"lower_prefill_share": 1.0}, "lower_prefill_share"),
        ({"eviction": "discard"}, "eviction"),
    ],
)
def test_invalid_scheduler_settings_are_refused_by_field(admin_user, fields, name):
    version = SchedulerSettings.load().version
    with pytest.raises(DomainError) as error:
        scheduler_settings_update(actor=admin_user, **fields)
    assert name in error.value.fields
    assert SchedulerSettings.load().version == version


def test_tier_esi_levels_must_be_levels(admin_user):
    with pytest.raises(DomainError) as error:
        tier_create(actor=admin_user, **{**TIER, "esi_levels": [0, 7]})
    assert "esi_levels" in error.value.fields


def test_the_live_scheduler_configuration_carries_the_preemption_settings(admin_user):
    from triage.selectors.scheduler import scheduler_config_load

    scheduler_settings_update(actor=admin_user, preempt_within_level=False, limited_preemption_c=0.5)
    config = scheduler_config_load()
    assert config.preempt_within_level is False and config.limited_preemption_c == 0.5


def test_the_live_scheduler_configuration_carries_the_stage_and_eviction_settings(admin_user):
    from triage.selectors.scheduler import scheduler_config_load

    scheduler_settings_update(actor=admin_user, stage_merge="strict", lower_prefill_share=0.0, eviction="swap")
    config = scheduler_config_load()
    assert (config.stage_merge, config.lower_prefill_share, config.eviction) == ("strict", 0.0, "swap")


def test_a_call_systems_share_weight_reaches_the_live_scheduler_configuration_audited(admin_user):
    from triage.selectors.scheduler import scheduler_config_load
    from triage.services.clients import api_client_create
    from triage.services.config import api_client_set_share_weight

    county = api_client_create(name="county-cad").client
    api_client_create(name="state-feed")
    version = SchedulerSettings.load().version
    api_client_set_share_weight(client=county, weight=3, actor=admin_user)
    assert scheduler_config_load().client_weights == {"county-cad": 3}  # weight 1 is the default, left out
    assert SchedulerSettings.load().version == version + 1  # the worker reloads
    event = AuditEvent.objects.get(action="api_client.share_set")
    assert event.data["client"] == "county-cad" and event.data["share_weight"] == 3
    for bad in (0, 101, True, 2.5):
        with pytest.raises(DomainError) as error:
            api_client_set_share_weight(client=county, weight=bad, actor=admin_user)
        assert "share_weight" in error.value.fields
