"""The uncertainty rule (an uncertain call is scheduled at the more urgent of its two levels) and the simulator's
error model drawn from our classifier's measured verdicts."""

import random

from scheduler.config import scheduling_level
from scheduler.cost import PRESETS
from scheduler.simulate import build_config, parse_args
from scheduler.simulator import simulate
from scheduler.workloads import Arrival, Prediction, UrgencyErrorModel, Verdict, predict


def test_an_uncertain_call_is_scheduled_at_the_more_urgent_of_its_two_levels():
    assert scheduling_level(3, 2) == 2
    assert scheduling_level(2, 4) == 2  # the alternative is less urgent: the verdict stands
    assert scheduling_level(4, None) == 4  # certain
    assert scheduling_level(3, 0) == 1  # an out-of-scale alternative is clamped, never below ESI 1


MEASURED = {
    "source": "test",
    "verdicts": [
        {"true": 1, "level": 1, "alternative": None, "calls": 6},
        {"true": 1, "level": 3, "alternative": 1, "calls": 3},  # missed, but doubted towards the right level
        {"true": 1, "level": 2, "alternative": None, "calls": 1},
        {"true": 3, "level": 3, "alternative": None, "calls": 10},
    ],
}


def test_the_error_model_reproduces_the_measured_verdicts_and_their_frequencies():
    model = UrgencyErrorModel.from_json(MEASURED)
    assert model.error_rate() == 4 / 20
    rng = random.Random(0)
    draws = [model.draw(rng, 1) for _ in range(4000)]
    assert abs(draws.count(Verdict(3, 1)) / 4000 - 0.3) < 0.03
    assert abs(draws.count(Verdict(1)) / 4000 - 0.6) < 0.03
    # at a chosen error rate the shape of the errors is kept: wrong verdicts in their measured proportions
    wrong = [v for v in (model.draw(rng, 1, error_rate=0.9) for _ in range(4000)) if v.level != 1]
    assert abs(len(wrong) / 4000 - 0.9) < 0.03
    assert abs(wrong.count(Verdict(3, 1)) / len(wrong) - 0.75) < 0.04
    # a level the set never got wrong borrows the others' errors, moved to it (ESI 1's 3-for-1 doubted
    # towards 1 becomes 5-for-3 doubted towards 3; 2-for-1 becomes 4-for-3)
    assert {model.draw(rng, 3, error_rate=1.0) for _ in range(200)} == {Verdict(5, 3), Verdict(4)}
    # with no errors anywhere, the paper's error: one level away, nothing named
    perfect = UrgencyErrorModel.from_json({"verdicts": [{"true": 3, "level": 3, "calls": 5}]})
    assert {perfect.draw(rng, 3, error_rate=1.0) for _ in range(200)} == {Verdict(2), Verdict(4)}


def test_predictions_carry_the_drawn_verdicts_alternative():
    arrivals = [Arrival(0.0, 1, 100, 100)] * 200
    predictions = predict(random.Random(1), arrivals, urgency_errors=UrgencyErrorModel.from_json(MEASURED))
    assert any(p.level == 3 and p.alternative == 1 for p in predictions)
    assert all(p.alternative is None or p.level == 3 for p in predictions)


def test_the_rule_puts_a_doubted_esi1_call_ahead_of_the_calls_it_was_mistaken_for():
    # one true ESI-1 call misjudged as ESI 3 but doubted towards 1, arriving with a crowd of true ESI-3 calls
    arrivals = [Arrival(0.0, 3, 200, 200) for _ in range(40)] + [Arrival(0.5, 1, 200, 200)]
    predictions = [Prediction(3, 200) for _ in range(40)] + [Prediction(3, 200, alternative=1)]
    args = parse_args(["--batch", "4", "--no-progress"])
    cost = PRESETS[args.profile]
    config = build_config(args, "semantic", cost)

    def esi1_wait(rule: bool) -> float:
        result = simulate(config, cost, arrivals, predictions, uncertainty_rule=rule).to_json()
        return result["by_esi"]["1"]["wait_mean"]

    assert esi1_wait(True) < esi1_wait(False) / 5
