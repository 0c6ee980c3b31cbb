"""The cost model: how long an iteration takes, and what a preempted request will cost to resume.

All pure functions of numbers (no clock, no I/O). Times in seconds, lengths in tokens.

- Prefill of n new tokens on top of k cached ones: ``alpha1 * ((k + n)**2 - k**2) + alpha2 * n``
  (the paper's ``alpha1 * n**2 + alpha2 * n`` when nothing is cached); a prefill batch sums over its requests.
- Decode step: ``gamma1 * sum(context) + gamma2``: weights are read once per step (``gamma2``), attention
  reads every request's cache (``gamma1`` per context token). A batch of b is far cheaper than b steps.
- Swap: ``beta`` seconds per token each way (device -> host on eviction, host -> device on resume). The
  device -> host copy of an eviction overlaps the iteration's compute (a copy engine, as vLLM and SGLang
  offload); the reload is on the critical path of the resuming request.
- Every iteration also pays ``iteration_overhead_s`` (scheduling, launch, sampling). The presets set it to
  0: their ``gamma2`` is the measured time of a whole decode step (Hua et al. fitted it to wall-clock step
  times), so the fixed per-iteration cost is already inside it and charging it again would count it twice.
  A cost model fitted with ``fit_cost_model`` separates the two (the prefill fit's intercept).

KV capacity (see ``GpuSpec``/``ModelSpec``): the KV cache of one token takes
``layers * 2 (K and V) * kv_heads * head_dim * dtype_bytes`` bytes, and the cache gets what is left of the
GPU's memory (times a utilisation factor, as vLLM's ``gpu_memory_utilization``) after the weights
(``params * dtype_bytes``) and an activation reserve:

    capacity_tokens = (gpu_bytes * utilisation - weight_bytes - activation_reserve_bytes) // kv_bytes_per_token

For the paper's profiles (Qwen1.5 has no grouped-query attention: kv_heads == heads, head_dim 128, fp16):

    Qwen1.5-4B: 40 layers x 2 x 20 heads x 128 x 2 B = 409,600 B/token;  weights 3.95e9 x 2 B = 7.90 GB
    Qwen1.5-7B: 32 layers x 2 x 32 heads x 128 x 2 B = 524,288 B/token;  weights 7.72e9 x 2 B = 15.44 GB
    A100 40 GB: 40 GiB x 0.9 = 38.65 GB usable;  A5000: 24 GiB x 0.9 = 23.19 GB;  activation reserve 2 GiB
    a100-4b:  (38.65 - 7.90 - 2.15) GB / 409,600 B = 69,841 tokens = 4,365 blocks of 16
    a100-7b:  (38.65 - 15.44 - 2.15) GB / 524,288 B = 40,182 tokens = 2,511 blocks of 16
    a5000-7b: (23.19 - 15.44 - 2.15) GB / 524,288 B = 10,691 tokens =   668 blocks of 16
    a5000-4b: (23.19 - 7.90 - 2.15) GB / 409,600 B  = 32,093 tokens = 2,005 blocks of 16

Coefficients of the presets are Hua et al.'s Appendix B fits, exactly as the authors' public simulator
(``continuous_batching_code/main.py``) uses them (alpha1, alpha2 for prefill; gamma1, gamma2 for a decode
step; beta 1e-4 s/token on A100, 3e-4 on A5000). Consequences worth knowing: on A100 beta (1e-4) is below
alpha2, so a prefilled cache is always worth keeping; on A5000 it never is below ~44,000 tokens (always
recompute); and a prefill of a 250-token prompt costs about two batch-16 decode steps on a100-4b (26 ms vs
12 ms), which is why mixing prefills into p*'s decode steps (Algorithm 3) matters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

GIB = 1024**3


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: float
    utilisation: float = 0.9
    activation_reserve_bytes: float = 2 * GIB


def kv_capacity_tokens(gpu: GpuSpec, model: ModelSpec) -> int:
    """Tokens of KV cache that fit beside the weights: the derivation in the module docstring."""
    free = gpu.memory_bytes * gpu.utilisation - model.weight_bytes - gpu.activation_reserve_bytes
    return max(0, int(free // model.kv_bytes_per_token))


@dataclass(frozen=True)
class CostModel:
    alpha1: float  # s per token^2 of prefill (attention)
    alpha2: float  # s per token of prefill (weights)
    gamma1: float  # s per context token per decode step
    gamma2: float  # s per decode step
    beta_s_per_token: float  # swap, each way
    iteration_overhead_s: float = 0.0
    kv_capacity_tokens: int = 1 << 20
    name: str = "custom"

    # --- iteration costs -------------------------------------------------------------------------
    def prefill_s(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """One request's prefill of ``new_tokens`` on top of ``cached_tokens``; O(1)."""
        total = cached_tokens + new_tokens
        return self.alpha1 * (total * total - cached_tokens * cached_tokens) + self.alpha2 * new_tokens

    def decode_step_s(self, context_tokens_sum: int) -> float:
        return self.gamma1 * context_tokens_sum + self.gamma2

    def swap_s(self, tokens: int) -> float:
        return self.beta_s_per_token * tokens

    # --- per-request estimates (the scheduling key's second component) ---------------------------
    def decode_s(self, steps: float, start_context: float) -> float:
        """Solo time of ``steps`` decode steps starting at ``start_context``: sum of gamma1*c + gamma2."""
        if steps <= 0:
            return 0.0
        return steps * self.gamma2 + self.gamma1 * (steps * start_context + steps * (steps - 1) / 2)

    def remaining_s(
        self, *, context_tokens: int, device_tokens: int, host_tokens: int, generated_tokens: int,
        remaining_output_tokens: float,
    ) -> float:
        """Predicted time to finish a request run alone: reload from host + prefill still owed + decode
        still owed. The prefill (if any) emits the first remaining token; O(1)."""
        cached = device_tokens + host_tokens
        pending = context_tokens - cached
        needs_prefill = pending > 1 or generated_tokens == 0
        t = self.swap_s(host_tokens)
        steps = remaining_output_tokens
        if needs_prefill:
            t += self.prefill_s(pending, cached)
            steps -= 1
        return t + self.decode_s(steps, context_tokens)

    # --- capacity and (de)serialisation ----------------------------------------------------------
    def kv_capacity_blocks(self, block_size: int) -> int:
        return self.kv_capacity_tokens // block_size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostModel:
        return cls(**data)


# --- the paper's cache-or-recompute rules (Hua et al., Algorithm 5) ------------------------------

def keep_or_recompute(prefilled_tokens: int, cost: CostModel) -> bool:
    """True: keep (swap) the KV of ``n`` prefilled tokens; False: drop it and recompute.

    Recomputing costs alpha1*n^2 + alpha2*n of compute when the request resumes; keeping costs beta*n to
    reload it. Saving it to host runs on the copy engine while the GPU computes the iteration that needed
    the space (executors overlap it; the simulator charges max(compute, swap-out)), so only the reload
    competes with compute: keep iff beta < alpha1*n + alpha2. O(1)."""
    n = prefilled_tokens
    return n > 0 and cost.beta_s_per_token < cost.alpha1 * n + cost.alpha2


def decoded_tokens_to_recompute(prefilled_tokens: int, cost: CostModel) -> float:
    """Hua et al.'s m*, derived again: of a preempted request's d decoded tokens, how many to recompute rather
    than keep, when recomputing a token costs a decode step at its context (gamma1*c + gamma2) and keeping one
    costs beta (its reload).

    Recomputing m decoded tokens right after the n prefilled ones (contexts n+1 .. n+m) and keeping the rest:

        f(m) = sum_{j=1..m} (gamma1*(n + j) + gamma2) + beta*(d - m)
             = m*gamma2 + gamma1*(m*n + m*(m + 1)/2) + beta*(d - m)

    is convex in m, and f'(m) = gamma2 + gamma1*n + gamma1*(2m + 1)/2 - beta = 0 gives

        m* = (beta - gamma1*n - (gamma1 + 2*gamma2)/2) / gamma1,  clipped at 0 (and at d by the caller).

    The paper prints 2*gamma1 in the denominator and calls m* the tokens to *keep*; the derivative of its own
    Eq. 5 gives gamma1, and the tokens to recompute. m* > 0 only where keeping a token costs more than decoding
    one right after the prompt (beta > gamma1*(n + 1) + gamma2: a slow host link beside a fast decode step);
    with every preset and our CPU calibration m* = 0: recompute none, keep every decoded token. O(1)."""
    if cost.gamma1 <= 0:
        return 0.0
    n = prefilled_tokens
    g1, g2 = cost.gamma1, cost.gamma2
    return max(0.0, (cost.beta_s_per_token - g1 * n - (g1 + 2 * g2) / 2) / g1)


# --- presets ---------------------------------------------------------------------------------------

QWEN15_4B = ModelSpec("Qwen1.5-4B", params=3.95e9, layers=40, kv_heads=20, head_dim=128)
QWEN15_7B = ModelSpec("Qwen1.5-7B", params=7.72e9, layers=32, kv_heads=32, head_dim=128)
A100_40GB = GpuSpec("A100-SXM4-40GB", memory_bytes=40 * GIB)
A5000 = GpuSpec("RTX A5000 24GB", memory_bytes=24 * GIB)


def _preset(name: str, gpu: GpuSpec, model: ModelSpec, **coefficients: float) -> CostModel:
    return CostModel(name=name, kv_capacity_tokens=kv_capacity_tokens(gpu, model), **coefficients)


PRESETS: dict[str, CostModel] = {
    # Coefficients: Hua et al. Appendix B, as in the authors' simulator (continuous_batching_code/main.py).
    # gamma2 is a measured per-step time, so it already includes the per-iteration overhead: 0 here.
    "a100-4b": _preset(
        "a100-4b", A100_40GB, QWEN15_4B, alpha1=1.46584975e-09, alpha2=1.0515576e-04, gamma1=5.91298857e-09,
        gamma2=1.195828e-02, beta_s_per_token=1e-4, iteration_overhead_s=0.0,
    ),
    "a100-7b": _preset(
        "a100-7b", A100_40GB, QWEN15_7B, alpha1=5.13462572e-07, alpha2=1.48057167e-04, gamma1=1.34911080e-08,
        gamma2=1.330198e-02, beta_s_per_token=1e-4, iteration_overhead_s=0.0,
    ),
    "a5000-7b": _preset(
        "a5000-7b", A5000, QWEN15_7B, alpha1=1.85905340e-09, alpha2=2.17527368e-04, gamma1=2.11725653e-06,
        gamma2=2.72656264e-02, beta_s_per_token=3e-4, iteration_overhead_s=0.0,
    ),
    "a5000-4b": _preset(
        "a5000-4b", A5000, QWEN15_4B, alpha1=1.58625005e-09, alpha2=1.30542054e-04, gamma1=2.86938135e-06,
        gamma2=3.00834536e-02, beta_s_per_token=3e-4, iteration_overhead_s=0.0,
    ),
}


# --- fitting from measurements -----------------------------------------------------------------------

def _lengths(sample: Sequence[int] | int) -> Sequence[int]:
    return [sample] if isinstance(sample, int) else sample


def fit_cost_model(
    prefill_samples: Sequence[tuple[Sequence[int] | int, float]],
    decode_samples: Sequence[tuple[Sequence[int] | int, float]],
    swap_samples: Sequence[tuple[int, float]] = (),
    *,
    base: CostModel | None = None,
) -> CostModel:
    """Least-squares coefficients from measured iterations.

    ``prefill_samples``: (prompt lengths of the batch, seconds) -> alpha1, alpha2 and the per-iteration
    overhead (intercept); ``decode_samples``: (contexts of the batch, seconds) -> gamma1 and gamma2
    (intercept less the overhead); ``swap_samples``: (tokens, seconds one way) -> beta (through the
    origin). Coefficients are clipped at 0. Missing kinds keep ``base``'s values. O(samples)."""
    base = base or PRESETS["a100-4b"]
    fitted: dict[str, float] = {}
    if prefill_samples:
        rows = [(sum(n * n for n in _lengths(x)), sum(_lengths(x)), 1.0) for x, _ in prefill_samples]
        a, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array([s for _, s in prefill_samples]), rcond=None)
        fitted.update(alpha1=max(0.0, a[0]), alpha2=max(0.0, a[1]), iteration_overhead_s=max(0.0, a[2]))
    if decode_samples:
        rows = [(sum(_lengths(x)), 1.0) for x, _ in decode_samples]
        g, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array([s for _, s in decode_samples]), rcond=None)
        overhead = fitted.get("iteration_overhead_s", base.iteration_overhead_s)
        fitted.update(gamma1=max(0.0, g[0]), gamma2=max(0.0, g[1] - overhead))
    if swap_samples:
        tokens = np.array([t for t, _ in swap_samples], dtype=float)
        seconds = np.array([s for _, s in swap_samples], dtype=float)
        denom = float(tokens @ tokens)
        if denom > 0:
            fitted["beta_s_per_token"] = max(0.0, float(tokens @ seconds) / denom)
    return replace(base, name="fitted", **{k: float(v) for k, v in fitted.items()})
