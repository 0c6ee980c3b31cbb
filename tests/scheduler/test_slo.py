"""The SLO monitor's window, the queue-based risk prediction, the surge controller's hysteresis, and what the
protect mode changes."""

from scheduler.config import SchedulerConfig, default_tiers
from scheduler.cost import PRESETS
from scheduler.request import Request
from scheduler.slo import (
    MAX_BATCH_WIDENING,
    SloWindow,
    SurgeController,
    SurgeMode,
    protect_batch_size,
    surge_config,
    ttft_at_risk,
)

TIERS = {level: SchedulerConfig().tier_for(None, level) for level in (1, 2, 3, 4, 5)}


def test_attainment_counts_each_measure_within_its_tiers_mean_target_over_the_window_only():
    window = SloWindow(window_s=60.0)
    window.first_token(1, 0.2, at_s=0.0)  # ESI 1's TTFT target: 0.5 s mean, 1 s p90
    for at in (50.0, 51.0, 52.0):
        window.first_token(1, 0.4, at_s=at)
    window.first_token(1, 3.0, at_s=53.0)
    window.done(1, e2e_s=8.0, tpot_s=0.05, at_s=53.0)
    now = 70.0  # the first sample has left the window
    ttft = window.attainment(now, TIERS)[1]
    assert ttft.calls["ttft"] == 4 and ttft.share["ttft"] == 0.75
    assert ttft.mean_s["ttft"] == (0.4 * 3 + 3.0) / 4 and ttft.p90_s["ttft"] == 3.0
    assert ttft.targets_met["ttft"] is False  # the mean 1.05 s is over 0.5 s
    assert (ttft.share["tpot"], ttft.targets_met["tpot"], ttft.share["e2e"]) == (1.0, True, 1.0)
    assert window.attainment(now, TIERS)[2].share["ttft"] is None  # nothing measured: no verdict


def _waiting(level: int, arrival_s: float, prompt: int = 400) -> Request:
    return Request(id=f"{level}-{arrival_s}", level=level, arrival_s=arrival_s, prompt_tokens=prompt,
                   predicted_output_tokens=200)


def test_a_protected_call_is_at_risk_when_the_prefills_ahead_of_it_outlast_its_target():
    cost, config = PRESETS["a5000-7b"], SchedulerConfig()
    one = [_waiting(1, 10.0)]
    assert not ttft_at_risk(one, [], cost, config, now_s=10.0)  # its own prefill fits in 0.5 s
    crowd = [_waiting(2, 10.0) for _ in range(30)]  # 30 ESI-2 prefills of 400 tokens: ~2.6 s > 1 s
    assert ttft_at_risk(crowd, [], cost, config, now_s=10.0)
    lower = [_waiting(4, 10.0) for _ in range(30)]  # ESI 4 is not protected: no risk
    assert not ttft_at_risk(lower, [], cost, config, now_s=10.0)


def _attained(share: float, calls: int = 10):
    window = SloWindow()
    for k in range(calls):
        window.first_token(2, 0.1 if k < share * calls else 9.0, at_s=0.0)
    return window.attainment(0.0, TIERS)


def test_the_controller_protects_on_risk_or_missed_targets_and_returns_only_after_a_calm_dwell():
    controller = SurgeController(min_dwell_s=30.0)
    good, bad = _attained(1.0), _attained(0.8)
    assert controller.update(0.0, good, at_risk=False) is None
    assert controller.update(1.0, good, at_risk=True) is SurgeMode.PROTECT  # predicted before observed
    assert controller.update(20.0, good, at_risk=False) is None  # calm, but not for 30 s yet
    assert controller.update(40.0, bad, at_risk=False) is None  # a miss restarts the calm
    assert controller.update(45.0, good, at_risk=False) is None
    assert controller.update(74.0, good, at_risk=False) is None
    assert controller.update(75.0, good, at_risk=False) is SurgeMode.NORMAL
    assert controller.update(76.0, bad, at_risk=False) is SurgeMode.PROTECT  # observed misses alone suffice
    # the burst is over (no protected call waits or runs): the window's old misses do not hold the mode
    over = SurgeController(min_dwell_s=30.0)
    assert over.update(0.0, bad, at_risk=True) is SurgeMode.PROTECT
    assert over.update(10.0, bad, at_risk=False, protected_idle=True) is None
    assert over.update(40.0, bad, at_risk=False, protected_idle=True) is SurgeMode.NORMAL
    assert over.update(41.0, bad, at_risk=False, protected_idle=True) is None  # nor enter it again
    few = _attained(0.0, calls=2)
    assert SurgeController().update(0.0, few, at_risk=False) is None  # two calls are not evidence


def test_protect_opens_extra_slots_only_as_far_as_the_protected_tpot_target_allows():
    base = SchedulerConfig(batch_size=16)
    assert surge_config(base, SurgeMode.NORMAL, PRESETS["a100-4b"], 400) is base
    # a100: a decode step barely grows with the batch: the widening cap binds
    assert protect_batch_size(base, PRESETS["a100-4b"], 400) == MAX_BATCH_WIDENING * 16
    # a5000: each request adds ~0.85 ms at 400 tokens of context; 0.1 s x 0.8 - 27 ms leaves room for 62
    assert protect_batch_size(base, PRESETS["a5000-7b"], 400) == 62
    # a tighter TPOT target leaves no room: never narrower than the administrator's batch
    tight = base.with_tier_changes(tpot_target_s=0.02)
    assert protect_batch_size(tight, PRESETS["a5000-7b"], 400) == 16
    protect = surge_config(base, SurgeMode.PROTECT, PRESETS["a5000-7b"], 400)
    assert (protect.batch_size, protect.surge_extra_slots, protect.stage_merge) == (16, 46, base.stage_merge)
    assert default_tiers()["Immediate"].tpot_target_s == 0.1


def test_in_a_simulated_mass_casualty_burst_the_mode_enters_and_leaves_by_itself_and_every_call_completes():
    from scheduler.simulate import build_config, build_workload, parse_args
    from scheduler.simulator import simulate

    args = parse_args(["--workload", "mass-casualty", "--rate", "1", "--concurrency", "120", "--duration", "240",
                       "--burst-at", "30", "--profile", "a5000-7b", "--no-progress"])
    cost = PRESETS[args.profile]
    arrivals, predictions = build_workload(args)
    off = simulate(build_config(args, "semantic", cost), cost, arrivals, predictions).to_json()
    on = simulate(build_config(args, "semantic", cost), cost, arrivals, predictions, surge_control=True).to_json()
    modes = [mode for _, mode in on["surge_modes"]]
    assert modes[:2] == ["protect", "normal"] and "surge_modes" not in off
    assert 30.0 <= on["surge_modes"][0][0] < 45.0  # the burst lands at 30 s: predicted at risk at once
    changes = on["surge_modes"]
    protected_for = [b[0] - a[0] for a, b in zip(changes, changes[1:], strict=False) if a[1] == "protect"]
    assert protected_for and min(protected_for) >= SurgeController.min_dwell_s  # hysteresis: no flapping out
    assert on["overall"]["count"] == off["overall"]["count"] == len(arrivals)  # nothing dropped
    assert on["config"]["batch_size"] == 16  # the lower tiers kept the administrator's batch
