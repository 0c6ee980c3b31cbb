import pytest

from scheduler.policies.schedule_queue import ScheduleQueue
from tests.scheduler.helpers import req


def _queue(*requests):
    q = ScheduleQueue()
    for r in requests:
        q.admit(r.id)
    return q


def test_the_best_key_pops_first_and_equal_keys_pop_in_arrival_order():
    a, b, c = req("a", 3), req("b", 1), req("c", 3)
    q = _queue(a, b, c)
    for r in (c, a, b):
        q.push(r, (r.level,))
    assert [q.pop().request.id for _ in range(3)] == ["b", "a", "c"]
    assert q.peek() is None and len(q) == 0
    with pytest.raises(IndexError):
        q.pop()


def test_re_keying_a_request_supersedes_its_earlier_entry():
    a, b = req("a", 2), req("b", 3)
    q = _queue(a, b)
    q.push(a, (2,))
    q.push(b, (3,))
    q.push(a, (5,))  # a got worse: b now goes first, and a is listed once
    assert len(q) == 2
    assert [q.pop().request.id for _ in range(2)] == ["b", "a"]
    assert q.peek() is None


def test_a_discarded_or_forgotten_request_is_no_longer_waiting():
    a, b = req("a", 1), req("b", 2)
    q = _queue(a, b)
    q.push(a, (1,))
    q.push(b, (2,))
    q.discard("a")
    assert "a" not in q and q.pop().request.id == "b"
    q.forget("b")
    assert q.waiting() == []


def test_an_entry_put_back_ranks_as_it_did_before_it_was_popped():
    a, b = req("a", 1), req("b", 2)
    q = _queue(a, b)
    q.push(a, (1,))
    q.push(b, (2,))
    popped = q.pop()
    assert popped.from_heap and "a" not in q
    q.put_back(popped)
    assert q.peek() == popped and {r.id for r in q.waiting()} == {"a", "b"}


def test_a_running_entry_ranks_with_its_arrival_order_but_is_not_waiting():
    a = req("a", 1)
    q = _queue(a)
    entry = q.running_entry(a, (1,))
    assert not entry.from_heap and entry.arrival_order == q.arrival_order("a") and "a" not in q
    q.admit("b")
    later = q.running_entry(req("b", 1), (1,))
    assert entry < later  # equal keys: the earlier arrival ranks first, and seq is never compared


def test_a_rekey_event_fires_only_for_the_entry_it_was_set_for():
    a, b = req("a", 4), req("b", 4)
    q = _queue(a, b)
    q.push(a, (4,), rekey_at_s=10.0)
    q.push(b, (4,), rekey_at_s=10.0)
    q.push(b, (3,))  # re-keyed before the event: b's old event is void
    assert list(q.due_rekeys(9.0)) == []
    assert [r.id for r in q.due_rekeys(10.0)] == ["a"]
    assert list(q.due_rekeys(11.0)) == []


def test_draining_returns_every_waiting_request_once_and_keeps_arrival_order():
    a, b = req("a", 1), req("b", 2)
    q = _queue(a, b)
    q.push(a, (1,), rekey_at_s=1.0)
    q.push(a, (0,))
    q.push(b, (2,))
    assert sorted(r.id for r in q.drain()) == ["a", "b"]
    assert len(q) == 0 and q.peek() is None and list(q.due_rekeys(5.0)) == []
    assert q.arrival_order("a") < q.arrival_order("b")
