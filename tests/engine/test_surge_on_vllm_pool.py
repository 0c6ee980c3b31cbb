"""The surge controller on a vLLM pool (worker/surge.py): the servers hold the queue, so the mode follows observed
attainment alone, protect mode degrades the lower levels' guidance as on our engine, and no slot is opened."""

import time

import pytest

from inference.backends.vllm_pool import VllmPool
from scheduler.slo import BRIEF_GUIDANCE_LEVELS, SloWindow, SurgeMode
from triage.audit_actions import AuditAction
from triage.models import AuditEvent
from worker.surge import SurgeLoop

pytestmark = pytest.mark.django_db(transaction=True)  # the loop closes stale connections, as the worker does


def test_on_a_vllm_pool_missed_targets_enter_protect_which_degrades_lower_levels_opens_no_slot_and_ends_by_itself():
    pool = VllmPool(urls=["http://127.0.0.1:9"], model="unused")  # nothing here contacts a server
    window = SloWindow()
    loop = SurgeLoop(pool, window)
    loop.driver.controller.min_dwell_s = 1.0
    assert loop.degrades and not loop.widens and loop.brief_levels() == ()
    pool.add_request("esi1", "prompt", level=1, predicted_output_tokens=10)
    now = time.time()
    assert loop.tick(now) is None  # nothing measured yet: a pool's queue predicts nothing here
    for _ in range(3):
        window.first_token(1, 5.0, now)  # 5 s against ESI 1's 0.5 s target
    assert loop.tick(now + 1.0) is SurgeMode.PROTECT
    assert loop.brief_levels() == BRIEF_GUIDANCE_LEVELS  # ESI 3-5 get key questions only; ESI 1-2 keep theirs
    entered = AuditEvent.objects.get(action=AuditAction.SURGE_MODE_CHANGED)
    assert entered.data["mode"] == "protect" and entered.data["extra_slots"] == 0
    assert entered.data["predicted_risk"] is False and pool.current_config().surge_extra_slots == 0
    assert loop.tick(now + 2.0) is None  # the misses stay in the window while an ESI-1 call is in the pool
    pool.reprioritise("esi1", 4)  # no protected call left: the burst is over
    assert loop.tick(now + 3.0) is None  # calm begins
    assert loop.tick(now + 4.0) is SurgeMode.NORMAL and loop.brief_levels() == ()
    modes = AuditEvent.objects.filter(action=AuditAction.SURGE_MODE_CHANGED).order_by("id")
    assert [e.data["mode"] for e in modes] == ["protect", "normal"]
