"""TRAIL's refined length prediction (Shahout et al., "Don't Stop Me Now"): a small MLP probe reads one
intermediate layer's hidden state at each decode step and predicts the bin of the remaining output length;
the bin distribution is smoothed over steps with a Bayesian update through a transition matrix:

    prior_t     = posterior_{t-1} @ T          T[i, j] = P(bin j at step t+1 | bin i at step t)
    posterior_t ∝ prior_t * softmax(probe(h_t))
    remaining_t = sum_k posterior_t[k] * typical_remaining[k]

Trained by `build_models` on the hidden states the guidance model produces while generating for the call
corpus; `LengthRefiner` plugs into the engine (one observe() per request per decode step).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

BIN_EDGES = (0, 8, 16, 32, 64, 128, 256)  # bin k holds remaining lengths in [edge_k, edge_{k+1})
PROBE_FILE, META_FILE = "length_probe.pt", "length_probe.json"


def bin_of(remaining: int) -> int:
    for k in range(len(BIN_EDGES) - 1, -1, -1):
        if remaining >= BIN_EDGES[k]:
            return k
    return 0


class ProbeMLP(nn.Module):
    """Per-feature standardisation (statistics of the training states; a LayerNorm would erase a signal
    spread evenly over features), then one hidden layer."""

    def __init__(self, hidden_size: int, n_bins: int = len(BIN_EDGES), width: int = 64) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.register_buffer("mean", torch.zeros(hidden_size))
        self.register_buffer("std", torch.ones(hidden_size))
        self.net = nn.Sequential(nn.Linear(hidden_size, width), nn.GELU(), nn.Linear(width, n_bins))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.net((hidden - self.mean) / self.std)


@dataclass
class LengthProbe:
    mlp: ProbeMLP
    layer: int
    transition: torch.Tensor  # [bins, bins], rows sum to 1
    prior: torch.Tensor  # [bins]: the bin distribution at the first decode step
    typical_remaining: torch.Tensor  # [bins]: mean remaining length of the training samples in each bin

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(self.mlp.state_dict(), directory / PROBE_FILE)
        hidden_size = self.mlp.hidden_size
        meta = {
            "layer": self.layer, "hidden_size": hidden_size, "bin_edges": list(BIN_EDGES),
            "transition": self.transition.tolist(), "prior": self.prior.tolist(),
            "typical_remaining": self.typical_remaining.tolist(),
        }
        (directory / META_FILE).write_text(json.dumps(meta, indent=1))

    @classmethod
    def load(cls, directory: Path) -> LengthProbe:
        meta = json.loads((directory / META_FILE).read_text())
        mlp = ProbeMLP(meta["hidden_size"])
        mlp.load_state_dict(torch.load(directory / PROBE_FILE, weights_only=True))
        return cls(
            mlp.eval(), meta["layer"], torch.tensor(meta["transition"]), torch.tensor(meta["prior"]),
            torch.tensor(meta["typical_remaining"]),
        )

    @torch.inference_mode()
    def bin_probabilities(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.mlp(hidden.float().cpu()), dim=-1)

    def smooth(self, previous: torch.Tensor | None, observed: torch.Tensor) -> torch.Tensor:
        prior = self.prior if previous is None else previous @ self.transition
        posterior = prior * observed
        return posterior / posterior.sum().clamp_min(1e-12)

    def expected_remaining(self, posterior: torch.Tensor) -> float:
        return float(posterior @ self.typical_remaining)


class LengthRefiner:
    """The engine's hook: keeps each request's posterior and returns its refined remaining length."""

    def __init__(self, probe: LengthProbe) -> None:
        self.probe = probe
        self.layer = probe.layer
        self._posterior: dict[str, torch.Tensor] = {}

    def observe(self, request_id: str, hidden: torch.Tensor, generated_tokens: int) -> float:
        posterior = self.probe.smooth(self._posterior.get(request_id), self.probe.bin_probabilities(hidden))
        self._posterior[request_id] = posterior
        return self.probe.expected_remaining(posterior)

    def forget(self, request_id: str) -> None:
        self._posterior.pop(request_id, None)


# --- training ----------------------------------------------------------------------------------------------

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
