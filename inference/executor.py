"""What the inference worker drives: our own engine (``inference.engine.Engine``) or a pool of vLLM servers
(``inference.backends.vllm_pool.VllmPool``). The worker reads and changes an executor only through this."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from inference.engine import StepResult
from scheduler.config import SchedulerConfig
from scheduler.cost_correction import CostCorrector
from scheduler.decision import KVUsage
from scheduler.request import Request


class LiveSequence(Protocol):
    request: Request


class Executor(Protocol):
    sequences: Mapping[str, LiveSequence]  # every live request by id: waiting, running or paused
    # Whether ``add_request(read_out=...)`` holds the output to those sentences; where not, only the stream
    # guard holds it (the worker passes read_out only where it is enforced).
    constrains_read_out: bool
    # The online correction of the executor's cost model (``scheduler.cost_correction``); None: it has none.
    cost_corrector: CostCorrector | None

    @property
    def policy_name(self) -> str: ...

    def add_request(self, request_id: str, prompt: str, *, level: int, predicted_output_tokens: int,
                    tier: str | None = None, arrival_s: float | None = None,
                    read_out: Iterable[str] | None = None, client: str = "") -> Request: ...

    def cancel(self, request_id: str) -> None: ...

    def reprioritise(self, request_id: str, level: int, tier: str | None = None) -> None: ...

    def has_work(self) -> bool: ...

    def step(self) -> StepResult: ...

    def running_ids(self) -> list[str]: ...

    def kv_usage(self) -> KVUsage: ...

    def kv_tokens_on_device(self) -> int: ...

    def kv_tokens_on_host(self) -> int: ...

    def reconfigure(self, config: SchedulerConfig) -> None: ...

    def current_config(self) -> SchedulerConfig: ...
