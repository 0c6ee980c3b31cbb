"""The simulator's predictor stage: immediate, full and lingering batches, one classifier worker or more, and
the urgent-first order of a backlog."""

import pytest

from scheduler.triage_stage import ClassifierCost, triaged_at

COST = ClassifierCost(per_batch_s=0.010, per_call_s=0.005)


def test_immediate_batching_classifies_a_lone_call_at_once_and_a_backlog_in_batches():
    assert triaged_at([1.0], [3], COST, mode="immediate", batch_max=4) == pytest.approx([1.015])
    # five at once, batches of 4: the first four together, the fifth after them
    done = triaged_at([0.0] * 5, [3] * 5, COST, mode="immediate", batch_max=4, urgent_first=False)
    assert done[:4] == pytest.approx([0.030] * 4) and done[4] == pytest.approx(0.030 + 0.015)


def test_full_batching_waits_for_a_full_batch_or_the_last_call():
    arrivals = [0.0, 0.1, 0.2, 0.3, 0.4]
    done = triaged_at(arrivals, [3] * 5, COST, mode="full", batch_max=4, urgent_first=False)
    assert done[:4] == pytest.approx([0.3 + 0.030] * 4)  # the fourth call completes the batch
    assert done[4] == pytest.approx(0.4 + 0.015)  # the trace's last call goes alone


def test_lingering_waits_at_most_the_linger_and_stops_early_when_the_batch_fills():
    slow = triaged_at([0.0, 0.5], [3, 3], COST, mode="linger", batch_max=4, linger_s=0.05)
    assert slow == pytest.approx([0.05 + 0.015, 0.5 + 0.05 + 0.015])  # nobody joined within the linger
    fast = triaged_at([0.0, 0.01, 0.02, 0.03], [3] * 4, COST, mode="linger", batch_max=4, linger_s=0.05)
    assert fast == pytest.approx([0.03 + 0.030] * 4)  # full at 0.03 s: no need to linger longer


def test_a_backlog_is_classified_most_urgent_first_and_a_second_worker_shares_it():
    levels = [5, 4, 3, 2, 1, 5, 4, 3]
    done = triaged_at([0.0] * 8, levels, COST, mode="immediate", batch_max=2)
    assert done[4] == min(done) and done[3] == min(done)  # ESI 1 and 2 in the first batch
    assert done[0] == max(done)
    two = triaged_at([0.0] * 8, levels, COST, mode="immediate", batch_max=2, workers=2)
    assert max(two) < max(done)
