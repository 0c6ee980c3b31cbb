"""Several replicas behind the router, simulated: every call is served once, an ESI-1 call never waits behind
work it could displace on any replica, and the same arguments give the same result."""

import json

import pytest

from scheduler import simulate as simulate_cli
from scheduler.cost import PRESETS
from scheduler.replica_simulator import simulate_replicas
from scheduler.routing import GOROUTING, ROUTING_RULES, RoutingRule
from scheduler.simulate import build_config, build_workload, parse_args
from scheduler.workloads import Arrival, Prediction

COST = PRESETS["a100-4b"]


def dispatch_day(*extra: str):
    args = parse_args(["--workload", "dispatch", "--rate", "4", "--requests", "150", "--batch", "8",
                       "--eviction", "recompute", "--no-preempt-within-level", "--seed", "3", *extra])
    arrivals, predictions = build_workload(args)
    return build_config(args, "semantic", COST), arrivals, predictions


@pytest.mark.parametrize("rule", ROUTING_RULES)
def test_every_call_is_served_once_across_the_replicas(rule):
    config, arrivals, predictions = dispatch_day()
    result = simulate_replicas(config, COST, arrivals, predictions, replicas=3, rule=RoutingRule(rule))
    assert len(result.outcomes) == len(arrivals)
    assert sum(result.extra["routed_per_replica"].values()) == len(arrivals)
    assert all(n > 0 for n in result.extra["routed_per_replica"].values())  # all three replicas worked
    assert sum(o.output_tokens for o in result.outcomes) == sum(a.output_tokens for a in arrivals)


@pytest.mark.parametrize("rule", ROUTING_RULES)
def test_an_esi1_call_starts_at_once_on_replicas_full_of_routine_work(rule):
    """Sixteen ESI-5 answers of 400 tokens for 16 slots when an ESI-1 call arrives: it has its first token
    after its own prefill and a step, not after an answer. Soonest-start filled every slot, so it displaces
    one; GoRouting kept the pool's last slot free for it, so nobody is preempted."""
    config, _, _ = dispatch_day()
    arrivals = [Arrival(0.0, 5, 200, 400) for _ in range(16)] + [Arrival(2.0, 1, 200, 50)]
    predictions = [Prediction(5, 400) for _ in range(16)] + [Prediction(1, 50)]
    result = simulate_replicas(config, COST, arrivals, predictions, replicas=2, rule=RoutingRule(rule))
    esi1 = next(o for o in result.outcomes if o.esi == 1)
    assert esi1.first_token_s - esi1.arrival_s < 0.2  # an ESI-5 answer takes about 5 s here
    if rule == GOROUTING:
        assert result.preemptions == 0 and len(result.outcomes) == 17
    else:
        assert result.preemptions >= 1


def test_the_replica_simulation_is_deterministic_and_reports_each_rule():
    argv = ["--workload", "dispatch", "--rate", "4", "--requests", "60", "--batch", "4", "--replicas", "2",
            "--routing", "soonest-start,gorouting", "--json"]
    import contextlib
    import io

    outputs = []
    for _ in range(2):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            simulate_cli.main(argv)
        outputs.append(buffer.getvalue())
    assert outputs[0] == outputs[1]
    results = json.loads(outputs[0])
    assert [r["config"]["routing"] for r in results] == ["soonest-start", GOROUTING]
    assert all(r["config"]["replicas"] == 2 for r in results)
    assert all(sum(r["by_esi"][level]["count"] for level in "12345") == 60 for r in results)
