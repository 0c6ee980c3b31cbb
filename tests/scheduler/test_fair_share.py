"""Fair share across call systems within a level (weighted VTC, scheduler/policies/fair_share.py)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.policies.fair_share import OUTPUT_WEIGHT, FairShareQueue
from scheduler.request import Request
from tests.scheduler.helpers import req, sched


def client_req(rid: str, level: int, client: str, *, out: int = 5, arrival: float = 0.0) -> Request:
    return replace(req(rid, level, out=out, arrival=arrival), client=client)


def served_order(s, now: float = 0.0, steps: int = 400) -> list[str]:
    """Ids in the order they first ran, iterating until everything is done (one slot: one request at a time)."""
    order: list[str] = []
    t = now
    for _ in range(steps):
        d = s.schedule(t)
        for r in d.batch:
            if r.id not in order:
                order.append(r.id)
        s.complete_iteration(t, d, [r.id for r in d.batch if r.generated_tokens + 1 >= r.true_output_tokens])
        t += 0.01
        if not s.has_work():
            break
    return order


def test_a_flooding_call_system_does_not_make_anothers_calls_of_the_same_level_wait_behind_all_of_its_own():
    s = sched(batch_size=1)
    for i in range(20):
        s.submit(client_req(f"flood{i}", 3, "flood", out=5))
    s.submit(client_req("quiet0", 3, "quiet", out=5))
    s.submit(client_req("quiet1", 3, "quiet", out=5))
    order = served_order(s)
    assert order.index("quiet0") <= 1 and order.index("quiet1") <= 3  # alternated with the flood, not after it
    assert len(order) == 22  # nobody dropped


def test_without_fair_share_the_flood_goes_first_by_the_policys_key():
    s = sched(batch_size=1, fair_share=False)
    for i in range(20):
        s.submit(client_req(f"flood{i}", 3, "flood", out=4))  # shorter: first by predicted remaining time
    s.submit(client_req("quiet0", 3, "quiet", out=5))
    assert served_order(s).index("quiet0") == 20


def test_a_more_urgent_level_goes_first_whoever_sent_it():
    s = sched(batch_size=1)
    s.submit(client_req("served", 3, "a", out=50))
    served_order(s)  # call system "a" has been served a lot, "b" nothing
    s.submit(client_req("b-low", 4, "b", out=5, arrival=1.0))
    s.submit(client_req("a-urgent", 2, "a", out=5, arrival=1.0))
    assert served_order(s, now=1.0)[:2] == ["a-urgent", "b-low"]


def test_weights_divide_service_in_proportion_while_both_wait():
    s = sched(batch_size=1, client_weights={"heavy": 2.0})
    for i in range(30):
        s.submit(client_req(f"h{i}", 3, "heavy", out=5))
        s.submit(client_req(f"l{i}", 3, "light", out=5))
    first = served_order(s)[:30]
    heavy = sum(1 for rid in first if rid.startswith("h"))
    assert 19 <= heavy <= 21  # two thirds of the service while both have calls waiting


def test_a_call_system_alone_keeps_the_policys_order():
    s = sched(batch_size=1)
    for i, out in enumerate((9, 3, 7, 5)):
        s.submit(client_req(f"r{i}", 3, "only", out=out))
    assert served_order(s) == ["r1", "r3", "r2", "r0"]  # shortest predicted first, as without fair share


def test_a_call_system_returning_after_a_quiet_spell_is_not_owed_the_service_it_did_not_use():
    q = FairShareQueue()
    q.charge("busy", 3, 0, 1000)
    q.admit("x")
    q.push(client_req("x", 3, "back"), (3, 1, 0.0))
    assert q.counters.get(("back", 3), 0.0) == 0.0  # nothing else waits: nothing to catch up with
    q.pop()
    q.admit("z")
    q.push(client_req("z", 3, "busy"), (3, 1, 0.0))
    q.admit("w")
    q.push(client_req("w", 3, "back2"), (3, 1, 0.0))
    assert q.counters["back2", 3] == q.counters["busy", 3] == 1000 * OUTPUT_WEIGHT  # lifted to the least waiting
    q.admit("v")
    q.push(client_req("v", 4, "back3"), (4, 1, 0.0))
    assert q.counters.get(("back3", 4), 0.0) == 0.0  # counters are per level: nobody waits at ESI 4


def test_service_at_one_level_does_not_count_against_a_call_systems_calls_of_another():
    s = sched(batch_size=1)
    s.submit(client_req("a-urgent", 2, "a", out=40))
    served_order(s)  # "a" has had a long ESI-2 generation
    s.submit(client_req("b3", 3, "b", out=5, arrival=1.0))
    s.submit(client_req("a3", 3, "a", out=4, arrival=1.0))  # shorter: first by the policy's key
    assert served_order(s, now=1.0) == ["a3", "b3"]


def test_charges_count_prefilled_tokens_once_and_output_tokens_at_their_weight():
    q = FairShareQueue(weights={"b": 2.0})
    q.charge("a", 3, 100, 1)
    q.charge("b", 3, 100, 1)
    assert q.counters == {("a", 3): 100 + OUTPUT_WEIGHT, ("b", 3): (100 + OUTPUT_WEIGHT) / 2}
