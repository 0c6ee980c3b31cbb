"""Routing over replicas: the most urgent call goes where it starts soonest, never behind displaceable work."""

from scheduler.routing import ReplicaState, placement_on, route


def esi(level: int, remaining: float = 50.0) -> tuple:
    return (level, 1, remaining)


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
    assert placement_on(esi(1), down) is None
    assert route(esi(1), [down, full("b", 5)]).replica == "b"


def test_no_esi1_call_waits_while_a_replica_runs_less_urgent_work_it_could_displace():
    """Every mix of levels on two full replicas: an ESI-1 call is held back only when both run ESI 1 only."""
    import itertools

    for mix_a, mix_b in itertools.product(itertools.combinations_with_replacement(range(1, 6), 3), repeat=2):
        replicas = [ReplicaState("a", 3, [esi(lv) for lv in mix_a]), ReplicaState("b", 3, [esi(lv) for lv in mix_b])]
        placement = route(esi(1), replicas)
        displaceable = any(lv > 1 for lv in mix_a + mix_b)
        assert (placement is not None) == displaceable, (mix_a, mix_b)
        if placement is not None:
            assert placement.displaces[0] == max(mix_a + mix_b)
