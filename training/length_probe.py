"""Training and scoring TRAIL's length probe (``inference/length_probe.py``) on the hidden states the guidance
model produces while generating for the call corpus (``manage.py build_models``)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from inference.length_probe import BIN_EDGES, LengthProbe, LengthRefiner, ProbeMLP, bin_of


@dataclass
class Trace:
    """One generated output: the probe layer's hidden state at each decode step, and the output's length."""

    request_id: str
    hidden: torch.Tensor  # [steps, hidden_size]; row i is the state that emitted output token i+1
    output_tokens: int


def _remaining(trace: Trace) -> list[int]:
    # After emitting token i+1 (0-based row i), output_tokens - (i + 1) tokens are still to come.
    return [trace.output_tokens - (i + 1) for i in range(trace.hidden.shape[0])]


def train_probe(traces: Sequence[Trace], layer: int, *, epochs: int = 30, seed: int = 0, lr: float = 3e-3) -> LengthProbe:
    torch.manual_seed(seed)
    xs = torch.cat([t.hidden for t in traces]).float()
    ys = torch.tensor([bin_of(r) for t in traces for r in _remaining(t)])
    n_bins = len(BIN_EDGES)
    counts = torch.bincount(ys, minlength=n_bins).float()
    remaining = torch.tensor([r for t in traces for r in _remaining(t)], dtype=torch.float)
    typical = torch.tensor(
        [float(remaining[ys == k].mean()) if counts[k] else float(BIN_EDGES[k]) for k in range(n_bins)]
    )
    transition = torch.ones(n_bins, n_bins)  # Laplace smoothing
    first = torch.ones(n_bins)
    for t in traces:
        bins = [bin_of(r) for r in _remaining(t)]
        if bins:
            first[bins[0]] += 1
        for a, b in zip(bins, bins[1:], strict=False):
            transition[a, b] += 1
    transition = transition / transition.sum(1, keepdim=True)

    mlp = ProbeMLP(xs.shape[1], n_bins)
    mlp.mean.copy_(xs.mean(0))
    mlp.std.copy_(xs.std(0).clamp_min(1e-4))
    optimizer = torch.optim.AdamW(mlp.parameters(), lr=lr, weight_decay=1e-3)
    weights = (counts.sum() / counts.clamp_min(1)).sqrt()  # soften the dominance of long outputs' many steps
    loss_fn = nn.CrossEntropyLoss(weight=weights / weights.mean())
    order = list(range(len(xs)))
    rng = random.Random(seed)
    mlp.train()
    for _ in range(epochs):
        rng.shuffle(order)
        for i in range(0, len(order), 512):
            idx = torch.tensor(order[i : i + 512])
            loss = loss_fn(mlp(xs[idx]), ys[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    mlp.eval()
    return LengthProbe(mlp, layer, transition, first / first.sum(), typical)


def evaluate_probe(
    probe: LengthProbe, traces: Sequence[Trace], prompt_only_total: dict[str, float],
    positions: Sequence[int] = (1, 8, 16, 32, 64, 128),
) -> list[dict]:
    """Mean absolute error of the remaining-length estimate at given decode positions: the smoothed probe
    vs the prompt-only prediction (predicted total minus tokens generated so far)."""
    errors: dict[int, dict[str, list[float]]] = {p: {"probe": [], "prompt_only": []} for p in positions}
    for t in traces:
        refiner = LengthRefiner(probe)
        for i in range(t.hidden.shape[0]):
            estimate = refiner.observe(t.request_id, t.hidden[i], i + 1)
            generated = i + 1
            if generated in errors:
                truth = t.output_tokens - generated
                errors[generated]["probe"].append(abs(estimate - truth))
                predicted = prompt_only_total.get(t.request_id)
                if predicted is not None:
                    errors[generated]["prompt_only"].append(abs(max(0.0, predicted - generated) - truth))
    rows = []
    for p in positions:
        e = errors[p]
        if e["probe"]:
            rows.append({
                "position": p, "requests": len(e["probe"]),
                "probe_mae": round(sum(e["probe"]) / len(e["probe"]), 2),
                "prompt_only_mae": round(sum(e["prompt_only"]) / len(e["prompt_only"]), 2) if e["prompt_only"] else None,
            })
    return rows
