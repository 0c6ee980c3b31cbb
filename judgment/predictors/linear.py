"""Linear heads on sparse call features: multinomial logistic regression (the ESI level, the protocol) and
ridge regression (log output length).

Both are convex, so L-BFGS reaches the same optimum from zeros every time: fitting is deterministic, needs no
seed, and a fit on 4,500 calls x 20,000 terms takes seconds. Inference is one sparse matrix product,
O(non-zeros x classes).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

MAX_ITERATIONS = 200


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Intra-op threads add nothing to products this small, and one thread keeps sparse reductions in a fixed
    order, so a fit gives the same bytes whatever the caller's thread setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass
class LinearHead:
    """``x @ weight.T + bias``; ``weight``: (outputs, inputs)."""

    weight: torch.Tensor
    bias: torch.Tensor

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float64) @ self.weight.T.to(torch.float64) + self.bias.to(torch.float64)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.scores(x), dim=1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"weight": self.weight, "bias": self.bias}

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor]) -> LinearHead:
        return cls(state["weight"].to(torch.float64), state["bias"].to(torch.float64))


def _minimise(loss_of, parameters: list[torch.Tensor]) -> None:
    optimiser = torch.optim.LBFGS(parameters, lr=1.0, max_iter=MAX_ITERATIONS, history_size=20,
                                  line_search_fn="strong_wolfe", tolerance_grad=1e-9, tolerance_change=1e-12)

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = loss_of()
        loss.backward()
        return loss

    with single_threaded():
        optimiser.step(closure)


def fit_softmax(
    x: torch.Tensor, labels: torch.Tensor, n_classes: int, *, l2: float, class_weight_power: float = 1.0
) -> LinearHead:
    """Weighted cross-entropy + ``l2`` x ||W||^2. Class weights are the balanced ones (n / (k x count)) raised
    to ``class_weight_power``: 1 counts every class alike, 0.5 favours rare classes less."""
    counts = torch.bincount(labels, minlength=n_classes).to(torch.float64).clamp(min=1)
    weights = (counts.sum() / (n_classes * counts)) ** class_weight_power
    weight = torch.zeros(n_classes, x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)

    def loss() -> torch.Tensor:
        scores = x @ weight.T + bias
        return torch.nn.functional.cross_entropy(scores, labels, weight=weights) + l2 * (weight**2).sum()

    _minimise(loss, [weight, bias])
    return LinearHead(weight.detach(), bias.detach())


def fit_ridge(x: torch.Tensor, targets: torch.Tensor, *, l2: float) -> LinearHead:
    """Mean squared error + ``l2`` x ||w||^2, one output."""
    weight = torch.zeros(1, x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    y = targets.to(torch.float64).unsqueeze(1)

    def loss() -> torch.Tensor:
        return ((x @ weight.T + bias - y) ** 2).mean() + l2 * (weight**2).sum()

    _minimise(loss, [weight, bias])
    return LinearHead(weight.detach(), bias.detach())
