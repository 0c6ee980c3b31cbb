"""The board shows the scheduler's aging: the level each call payload carries, and the level changes it
announces, are ``scheduler.policies.aging.effective_level`` at every moment, whatever the tier's ceiling."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler.config import ESI_LEVELS
from scheduler.policies.aging import effective_level
from triage.models import Call, SchedulerSettings, Tier

pytestmark = pytest.mark.django_db

STEP_S = 30.0
WAITED_S = (0.0, 10.0, 29.0, 30.0, 45.0, 60.0, 95.0, 150.0, 1000.0)


def displayed_level(payload: dict, at: dt.datetime) -> int:
    """What board.js's ``effectiveLevel`` shows at ``at``: the payload's level, moved on by each change due."""
    level = payload["effective_level"]
    for change in payload["level_changes"]:
        if dt.datetime.fromisoformat(change["at"]) <= at:
            level = change["level"]
    return level


@pytest.mark.parametrize("ceiling", ESI_LEVELS)
def test_the_board_shows_the_schedulers_aged_level_for_every_ceiling_and_waiting_time(make_call, ceiling):
    from triage.selectors.queue import call_state
    from triage.selectors.scheduler import scheduler_config_load

    tier = Tier.objects.get(name="Urgent")
    Tier.objects.filter(pk=tier.pk).update(esi_levels=list(ESI_LEVELS), aging_step_s=STEP_S, aging_ceiling_level=ceiling)
    tier.refresh_from_db()
    calls = [make_call(level) for level in ESI_LEVELS]
    Call.objects.filter(pk__in=[c.pk for c in calls]).update(tier=tier)
    config = scheduler_config_load()
    policy = tier.policy()
    for call in calls:
        call.refresh_from_db()
        for waited_s in WAITED_S:
            now = call.created_at + dt.timedelta(seconds=waited_s)
            payload = call_state(call, config=config, now=now)
            assert payload["effective_level"] == effective_level(call.level, waited_s, policy, True)
            for later_s in range(int(waited_s), int(waited_s) + 200, 5):
                later = call.created_at + dt.timedelta(seconds=later_s)
                assert displayed_level(payload, later) == effective_level(call.level, later_s, policy, True), (
                    call.level, ceiling, waited_s, later_s,
                )


def test_an_old_esi5_call_is_queued_ahead_of_a_fresh_esi3_but_behind_esi1(make_call):
    from triage.selectors.queue import queue_snapshot

    Tier.objects.update(aging_step_s=STEP_S, aging_ceiling_level=2)
    old5, fresh3, fresh1 = make_call(5), make_call(3), make_call(1)
    Call.objects.filter(pk=old5.pk).update(created_at=old5.created_at - dt.timedelta(seconds=10 * STEP_S))
    calls = queue_snapshot(with_metrics=False)["calls"]
    assert [c["id"] for c in calls] == [fresh1.pk, old5.pk, fresh3.pk]
    assert calls[1]["level"] == 5 and calls[1]["effective_level"] == 2


def test_with_aging_switched_off_the_board_shows_each_calls_own_level(make_call):
    from triage.selectors.queue import queue_snapshot

    Tier.objects.update(aging_step_s=STEP_S)
    SchedulerSettings.objects.filter(pk=SchedulerSettings.load().pk).update(aging_enabled=False)
    old5 = make_call(5)
    Call.objects.filter(pk=old5.pk).update(created_at=old5.created_at - dt.timedelta(seconds=10 * STEP_S))
    [state] = queue_snapshot(with_metrics=False)["calls"]
    assert state["effective_level"] == 5 and state["level_changes"] == []


def test_a_new_tier_ages_to_the_schedulers_default_ceiling():
    from scheduler.config import TierPolicy

    assert Tier._meta.get_field("aging_ceiling_level").default == TierPolicy.aging_ceiling_level


def test_changing_a_tiers_aging_sends_the_boards_live_calls_again(make_call, board_redis, django_capture_on_commit_callbacks):
    from triage.realtime import DIRTY_KEY
    from triage.services.config import tier_update

    call = make_call(4)
    board_redis.delete(DIRTY_KEY)
    with django_capture_on_commit_callbacks(execute=True):
        tier_update(tier=call.tier, actor="test", aging_step_s=STEP_S)
    assert board_redis.smembers(DIRTY_KEY) == {str(call.pk)}
