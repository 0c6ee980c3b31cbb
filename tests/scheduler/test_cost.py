import pytest

from scheduler.cost import (
    PRESETS,
    QWEN15_4B,
    QWEN15_7B,
    CostModel,
    decoded_tokens_to_recompute,
    fit_cost_model,
    keep_or_recompute,
)

C = CostModel(alpha1=1e-6, alpha2=1e-4, gamma1=1e-5, gamma2=1e-3, beta_s_per_token=3e-4)


def test_keep_prefilled_cache_only_when_reloading_is_cheaper_than_recomputing():
    # beta = 3e-4 < alpha1*n + alpha2 = 1e-6*n + 1e-4  <=>  n > 200
    assert not keep_or_recompute(200, C)
    assert keep_or_recompute(201, C)
    assert not keep_or_recompute(0, C)


def test_m_star_is_the_decoded_tokens_to_recompute_where_the_derivative_of_eq_5_vanishes():
    # m* = (beta - g1*n - (g1 + 2*g2)/2) / g1 = (3e-4 - 1e-5*n - 1.005e-3) / 1e-5  -> negative: 0
    assert decoded_tokens_to_recompute(10, C) == 0.0
    big_beta = CostModel(alpha1=0, alpha2=0, gamma1=1e-5, gamma2=1e-3, beta_s_per_token=5e-3)
    # (5e-3 - 1e-5*100 - 1.005e-3) / 1e-5 = 2.995e-3 / 1e-5 = 299.5
    m = decoded_tokens_to_recompute(100, big_beta)
    assert m == pytest.approx(299.5)

    def f(recomputed: int, n: int = 100, decoded: int = 1000) -> float:  # Eq. 5: recompute m, keep the rest
        steps = sum(big_beta.gamma1 * (n + j) + big_beta.gamma2 for j in range(1, recomputed + 1))
        return steps + big_beta.beta_s_per_token * (decoded - recomputed)

    best = min(range(1001), key=f)
    assert best in (299, 300)  # the integer minimum brackets m*


def test_presets_kv_capacity_follows_memory_minus_weights_over_bytes_per_token():
    assert QWEN15_4B.kv_bytes_per_token == 40 * 2 * 20 * 128 * 2 == 409_600
    assert QWEN15_7B.kv_bytes_per_token == 32 * 2 * 32 * 128 * 2 == 524_288
    gib = 1024**3
    assert PRESETS["a100-7b"].kv_capacity_tokens == int((40 * gib * 0.9 - 7.72e9 * 2 - 2 * gib) // 524_288)
    # the 7B model leaves less room for KV than the 4B one, and the A5000 least of all
    assert PRESETS["a5000-7b"].kv_capacity_tokens < PRESETS["a100-7b"].kv_capacity_tokens < PRESETS["a100-4b"].kv_capacity_tokens


def test_least_squares_fit_recovers_the_coefficients_that_generated_the_samples():
    truth = CostModel(alpha1=3e-8, alpha2=1.5e-4, gamma1=2e-7, gamma2=0.025, beta_s_per_token=1e-4,
                      iteration_overhead_s=0.002)
    prefill = [(lens, sum(truth.prefill_s(n) for n in lens) + truth.iteration_overhead_s)
               for lens in ([100], [400, 20], [250, 250, 250], [499], [10, 30, 70, 300])]
    decode = [(ctx, truth.decode_step_s(sum(ctx)) + truth.iteration_overhead_s)
              for ctx in ([100] * 4, [500] * 16, [900, 30], [300] * 64)]
    swap = [(t, truth.swap_s(t)) for t in (16, 160, 1600)]
    fitted = fit_cost_model(prefill, decode, swap)
    for name in ("alpha1", "alpha2", "gamma1", "gamma2", "beta_s_per_token", "iteration_overhead_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6, abs=1e-12)


def test_cost_model_round_trips_through_json_dict():
    for preset in PRESETS.values():
        assert CostModel.from_dict(preset.to_dict()) == preset


def test_remaining_time_counts_reload_prefill_and_decode_still_owed():
    fresh = C.remaining_s(context_tokens=100, device_tokens=0, host_tokens=0, generated_tokens=0,
                          remaining_output_tokens=3)
    assert fresh == pytest.approx(C.prefill_s(100) + C.decode_s(2, 100))
    swapped = C.remaining_s(context_tokens=100, device_tokens=0, host_tokens=99, generated_tokens=5,
                            remaining_output_tokens=3)
    assert swapped == pytest.approx(C.swap_s(99) + C.decode_s(3, 100))


def test_presets_carry_the_papers_appendix_b_coefficients():
    # Hua et al. Appendix B, as in the authors' simulator (continuous_batching_code/main.py).
    paper = {
        "a100-4b": (1.46584975e-09, 1.0515576e-04, 5.91298857e-09, 1.195828e-02, 1e-4),
        "a100-7b": (5.13462572e-07, 1.48057167e-04, 1.34911080e-08, 1.330198e-02, 1e-4),
        "a5000-7b": (1.85905340e-09, 2.17527368e-04, 2.11725653e-06, 2.72656264e-02, 3e-4),
        "a5000-4b": (1.58625005e-09, 1.30542054e-04, 2.86938135e-06, 3.00834536e-02, 3e-4),
    }
    for name, (a1, a2, g1, g2, beta) in paper.items():
        c = PRESETS[name]
        assert (c.alpha1, c.alpha2, c.gamma1, c.gamma2, c.beta_s_per_token) == (a1, a2, g1, g2, beta), name
        assert c.iteration_overhead_s == 0.0, name  # gamma2 is a measured step time: overhead included


def test_preset_iteration_costs_match_hand_computed_values():
    c = PRESETS["a100-4b"]
    # prefill of 250 tokens: 1.46584975e-9 * 62,500 + 1.0515576e-4 * 250 = 9.16156e-5 + 0.02628894 s
    assert c.prefill_s(250) == pytest.approx(0.026380555609375)
    # a decode step over 16 requests of 500 context tokens: 5.91298857e-9 * 8,000 + 1.195828e-2
    assert c.decode_step_s(8000) == pytest.approx(0.01200558390856)


def test_preset_cache_or_recompute_rule_matches_hand_computed_thresholds():
    # A100: beta 1e-4 < alpha2 ~1.05e-4, so any prefilled cache is kept (reloading beats recomputing).
    assert keep_or_recompute(1, PRESETS["a100-4b"]) and keep_or_recompute(1, PRESETS["a100-7b"])
    # A5000 7B: keep iff n > (3e-4 - 2.17527368e-4) / 1.8590534e-9 = 44,362.9 tokens: beyond any context.
    a5000 = PRESETS["a5000-7b"]
    assert not keep_or_recompute(44_362, a5000)
    assert keep_or_recompute(44_363, a5000)
    # m* with gamma2 of ~12 ms and beta 1e-4: the numerator is negative, nothing decoded is recomputed.
    assert all(decoded_tokens_to_recompute(100, cost) == 0.0 for cost in PRESETS.values())
