"""Fixtures of the vLLM-environment tests: the tiny guidance model and in-process vLLM engines.

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a test drives
``LLMEngine.step()`` one iteration at a time and reads the scheduler's state directly.

Engines come in both of vLLM's scheduling modes: ``sync`` (what vLLM runs on CPU) and ``async`` (what it runs on
CUDA: a step is scheduled while the previous one executes, through a batch queue of two). vLLM's CPU platform
turns async scheduling off as "not required on CPU"; its CPU model runner subclasses the GPU one and runs the
async path, so these tests undo that one override to exercise, here, the look-ahead every GPU server runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SEMANTIC = {"sync": "inference.backends.vllm_scheduler.SemanticVllmScheduler",
            "async": "inference.backends.vllm_scheduler.SemanticAsyncVllmScheduler"}
MODES = ("sync", "async")


def _keep_requested_async_scheduling() -> None:
    from vllm.platforms.cpu import CpuPlatform

    platform_update = CpuPlatform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config) -> None:  # noqa: ANN001 - vLLM's signature
        requested = vllm_config.scheduler_config.async_scheduling
        platform_update(cls, vllm_config)
        if requested:
            vllm_config.scheduler_config.async_scheduling = True

    CpuPlatform.check_and_update_config = classmethod(check_and_update_config)


_keep_requested_async_scheduling()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The main suite's tiny guidance model, built (or reused) by the main environment, which trains it."""
    python = os.environ.get("TRIAGE_MAIN_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    out = subprocess.run(
        [python, "-c", "from tests.fixtures.llm import build_tiny_guidance_model as b; print(b())"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def make_engine(model: Path, scheduler_cls: str | None, max_num_seqs: int = 4,
                mode: str = "sync"):  # noqa: ANN201 - LLMEngine
    """An engine with ``scheduler_cls`` (None: vLLM's own choice for the mode) in mode ``sync`` or ``async``."""
    from vllm import EngineArgs, LLMEngine

    args = EngineArgs(model=str(model), dtype="float32", max_model_len=512, enforce_eager=True, seed=0,
                      max_num_seqs=max_num_seqs, scheduling_policy="priority", async_scheduling=mode == "async",
                      **({"scheduler_cls": scheduler_cls} if scheduler_cls else {}))
    engine = LLMEngine.from_engine_args(args)
    assert engine_core(engine).async_scheduling == (mode == "async")
    return engine


def engine_core(engine):  # noqa: ANN001, ANN201 - the in-process engine core
    return engine.engine_core.engine_core


def scheduler_of(engine):  # noqa: ANN001, ANN201 - the engine core's scheduler (in-process core only)
    return engine_core(engine).scheduler


@pytest.fixture(scope="session", params=MODES)
def mode(request) -> str:  # noqa: ANN001
    """Every test that takes an engine runs in both scheduling modes."""
    return request.param


@pytest.fixture(scope="session")
def semantic_engine(tiny_model, mode) -> Iterator:
    engine = make_engine(tiny_model, SEMANTIC[mode], mode=mode)
    yield engine
    del engine


@pytest.fixture(scope="session")
def stock_engine(tiny_model, mode) -> Iterator:
    engine = make_engine(tiny_model, None, mode=mode)
    yield engine
    del engine
