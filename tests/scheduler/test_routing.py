"""Routing over replicas: the most urgent call goes where it starts soonest (or, under GoRouting, where it
earns the most TDG), never behind displaceable work."""

import itertools

import pytest

from scheduler.replica_state import ReplicaState, RoutedCall
from scheduler.routing import GOROUTING, ROUTING_RULES, SOONEST_START, RoutingRule, placement_on, route


def esi(level: int, remaining: float = 50.0) -> RoutedCall:
    return RoutedCall(key=(level, 1, remaining))


def full(name: str, level: int, capacity: int = 4, **kw) -> ReplicaState:
    return ReplicaState(name, capacity, [esi(level, 40.0 + i) for i in range(capacity)], **kw)


def test_an_esi1_call_displaces_esi5_work_on_one_replica_rather_than_queue_behind_esi2_work_on_another():
    replicas = [full("a", 2), full("b", 5)]
    placement = route(esi(1), replicas)
    assert placement.replica == "b" and placement.starts_now and placement.displaces[0] == 5


def test_a_free_slot_wins_over_displacing_anyone():
    replicas = [full("a", 5), ReplicaState("b", 4, [esi(2)] * 3)]
    assert route(esi(1), replicas) == route(esi(1), replicas[1:])
    assert route(esi(1), replicas).replica == "b" and route(esi(1), replicas).displaces is None


def test_the_least_urgent_victim_on_offer_is_displaced():
    replicas = [full("a", 4), full("b", 5), full("c", 3)]
    assert route(esi(2), replicas).replica == "b"


def test_a_call_that_beats_no_running_call_stays_in_the_global_queue_when_no_replica_has_room_ahead():
    replicas = [full("a", 1), full("b", 2)]
    assert route(esi(3), replicas) is None
    # within a level nobody is displaced, however short the newcomer (recompute-only replicas)
    assert route(esi(1, 1.0), [full("a", 1), full("b", 1)]) is None


def test_with_room_ahead_a_call_queues_where_fewest_calls_are_ahead_of_it():
    a = ReplicaState("a", 2, [esi(1), esi(1), esi(3)], queue_ahead=2)
    b = ReplicaState("b", 2, [esi(1), esi(2)], queue_ahead=2)
    placement = route(esi(2, 10.0), [a, b])
    assert placement.replica == "b" and not placement.starts_now


def test_a_replica_that_is_down_gets_nothing():
    down = ReplicaState("a", 4, [], up=False)
    assert placement_on(esi(1).key, down) is None
    assert route(esi(1), [down, full("b", 5)]).replica == "b"


@pytest.mark.parametrize("rule", ROUTING_RULES)
def test_no_esi1_call_waits_while_a_replica_runs_less_urgent_work_it_could_displace(rule):
    """Every mix of levels on two full replicas: an ESI-1 call is held back only when both run ESI 1 only."""
    for mix_a, mix_b in itertools.product(itertools.combinations_with_replacement(range(1, 6), 3), repeat=2):
        replicas = [ReplicaState("a", 3, [esi(lv) for lv in mix_a]), ReplicaState("b", 3, [esi(lv) for lv in mix_b])]
        placement = route(esi(1), replicas, rule=RoutingRule(rule))
        displaceable = any(lv > 1 for lv in mix_a + mix_b)
        assert (placement is not None) == displaceable, (mix_a, mix_b)
        if placement is not None:
            assert placement.displaces[0] == max(mix_a + mix_b)


# --- GoRouting: gain against the call's tier targets, loss of its victim, reserved capacity ----------------------

def tiered(level: int, remaining: int = 50, *, waited_s: float = 0.0, generated: int = 0) -> RoutedCall:
    """A call with the default tiers' targets (TTFT 0.5/1/5/30/60 s, TPOT 0.1 s, weights 16/8/4/2/1)."""
    ttft = {1: 0.5, 2: 1.0, 3: 5.0, 4: 30.0, 5: 60.0}[level]
    return RoutedCall(key=(level, 1, float(remaining)), remaining_tokens=remaining, prompt_tokens=100,
                      generated_tokens=generated, waited_s=waited_s, ttft_target_s=ttft, tpot_target_s=0.1,
                      weight={1: 16.0, 2: 8.0, 3: 4.0, 4: 2.0, 5: 1.0}[level])


GO = RoutingRule(GOROUTING)


def test_a_call_started_in_time_earns_every_token_and_a_late_one_loses_what_the_replica_cannot_catch_up():
    from scheduler.gorouting import weighted_tokens_on_time
    from scheduler.metrics import FIRST_TOKEN_WEIGHT

    call = tiered(1, 10)  # TTFT 0.5 s, TPOT 0.1 s, weight 16
    assert weighted_tokens_on_time(call, 0.4, 0.05) == 16 * (10 + FIRST_TOKEN_WEIGHT - 1)
    # 0.2 s late at 0.05 s of slack per token: tokens 1-4 late, 5-10 on time
    assert weighted_tokens_on_time(call, 0.7, 0.05) == 16 * 6
    # a replica slower than the target falls behind: on time only while the start's slack lasts
    assert weighted_tokens_on_time(call, 0.3, 0.2) == 16 * (3 + FIRST_TOKEN_WEIGHT - 1)
    assert weighted_tokens_on_time(call, 0.6, 0.2) == 0


def test_gorouting_queues_a_call_where_a_slot_frees_first_not_where_fewest_calls_are_ahead():
    # a: two long answers ahead (300 tokens each); b: three short ones (5 tokens each), one of them queued
    a = ReplicaState("a", 2, [tiered(2, 300), tiered(2, 300)], queue_ahead=2, step_s=0.05)
    b = ReplicaState("b", 2, [tiered(2, 5), tiered(2, 5), tiered(2, 5)], queue_ahead=2, step_s=0.05)
    call = tiered(3, 50)
    assert route(call, [a, b]).replica == "a"  # soonest-start: 2 ahead of it rather than 3
    placement = route(call, [a, b], rule=GO)
    assert placement.replica == "b" and not placement.starts_now


def test_gorouting_displaces_on_a_fast_replica_rather_than_miss_the_ttft_target_on_a_slow_free_one():
    slow = ReplicaState("slow", 4, [tiered(5)], step_s=1.0)  # a free slot, but the first token comes after 1 s
    fast = ReplicaState("fast", 2, [tiered(5), tiered(5)], step_s=0.02)  # ESI-5 calls with a minute of slack
    assert route(tiered(1), [slow, fast]).replica == "slow"  # soonest-start: a free slot wins
    placement = route(tiered(1), [slow, fast], rule=GO)
    assert placement.replica == "fast" and placement.displaces[0] == 5


def test_gorouting_keeps_the_pools_last_free_slot_for_an_urgent_call():
    full_a = ReplicaState("a", 2, [tiered(3), tiered(3)])
    one_free = ReplicaState("b", 2, [tiered(3)])
    assert route(tiered(4), [full_a, one_free], rule=GO) is None
    assert route(tiered(4), [full_a, one_free]).replica == "b"  # soonest-start fills it
    assert route(tiered(2), [full_a, one_free], rule=GO).replica == "b"
    assert route(tiered(4), [full_a, one_free], rule=RoutingRule(GOROUTING, reserve_slots=0)).replica == "b"


def test_gorouting_spreads_calls_of_equal_gain_and_with_packing_packs_only_short_routine_ones():
    busy = ReplicaState("busy", 4, [tiered(4), tiered(4)])
    idle = ReplicaState("idle", 4, [])
    assert route(tiered(4, 50), [busy, idle], rule=GO).replica == "idle"
    packing = RoutingRule(GOROUTING, pack=True)
    assert route(tiered(4, 50), [busy, idle], rule=packing).replica == "busy"
    assert route(tiered(4, 300), [busy, idle], rule=packing).replica == "idle"
    assert route(tiered(1, 50), [busy, idle], rule=packing).replica == "idle"


def test_an_unknown_routing_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="routing rule"):
        RoutingRule("least-load")
    assert SOONEST_START in ROUTING_RULES
