import inspect

import pytest

from scheduler.decision import KVUsage, Scheduler
from scheduler.policies import POLICIES
from tests.scheduler.helpers import req, sched, step

PROTOCOL_METHODS = sorted(
    name for name, member in vars(Scheduler).items() if not name.startswith("_") and inspect.isfunction(member)
)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_answers_every_call_of_the_scheduler_protocol_with_the_same_signature(policy):
    cls = POLICIES[policy]
    for name in PROTOCOL_METHODS:
        declared = list(inspect.signature(getattr(Scheduler, name)).parameters)
        assert list(inspect.signature(getattr(cls, name)).parameters) == declared, name


def test_kv_usage_reports_the_blocks_the_running_batch_holds_against_the_capacity():
    s = sched(kv_capacity_blocks=50, block_size=4)
    assert s.kv_usage() == KVUsage(used_blocks=0, capacity_blocks=50)
    s.submit(req("a", 1, prompt=10))
    step(s, 0.0)
    assert s.kv_usage() == KVUsage(used_blocks=3, capacity_blocks=50)  # ceil(10 / 4)
