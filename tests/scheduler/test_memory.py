from scheduler.memory import EvictionHeap, KVMemory
from tests.scheduler.helpers import req


def test_blocks_reserved_for_a_tier_are_unavailable_to_other_tiers():
    mem = KVMemory(capacity_blocks=100, block_size=16, reserved_blocks={"Immediate": 20})
    assert mem.headroom("Urgent") == 80
    assert mem.headroom("Immediate") == 100
    mem.resize("a", "Urgent", 80 * 16)
    assert mem.headroom("Urgent") == 0
    assert mem.headroom("Immediate") == 20
    mem.resize("b", "Immediate", 10 * 16)  # uses its own reservation
    assert mem.headroom("Urgent") == 0 and mem.headroom("Immediate") == 10
    mem.free("a")
    assert mem.used_blocks == 10 and mem.headroom("Urgent") == 80


def test_eviction_heap_pops_least_urgent_then_longest_remaining_first():
    heap = EvictionHeap()
    a, b, c, d = req("a", 1), req("b", 5), req("c", 5), req("d", 3)
    heap.push(a, (1, 10.0))
    heap.push(b, (5, 2.0))
    heap.push(c, (5, 9.0))
    heap.push(d, (3, 1.0))
    heap.discard("d")
    assert [heap.pop().id for _ in range(3)] == ["c", "b", "a"]
    assert heap.pop() is None
