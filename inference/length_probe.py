"""TRAIL's refined length prediction (Shahout et al., "Don't Stop Me Now"): a small MLP probe reads one
intermediate layer's hidden state at each decode step and predicts the bin of the remaining output length;
the bin distribution is smoothed over steps with a Bayesian update through a transition matrix:

    prior_t     = posterior_{t-1} @ T          T[i, j] = P(bin j at step t+1 | bin i at step t)
    posterior_t ∝ prior_t * softmax(probe(h_t))
    remaining_t = sum_k posterior_t[k] * typical_remaining[k]

Trained by `build_models` on the hidden states the guidance model produces while generating for the call
corpus (``training/length_probe.py``); `LengthRefiner` plugs into the engine (one observe() per request per
decode step).
"""

from __future__ import annotations

import json
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
