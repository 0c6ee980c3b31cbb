"""Fixtures of the vLLM-environment tests: the tiny guidance model and in-process vLLM engines.

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a test drives
``LLMEngine.step()`` one iteration at a time and reads the scheduler's state directly.
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
SEMANTIC = "inference.backends.vllm_scheduler.SemanticVllmScheduler"


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The main suite's tiny guidance model, built (or reused) by the main environment, which trains it."""
    python = os.environ.get("TRIAGE_MAIN_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    out = subprocess.run(
        [python, "-c", "from tests.fixtures.llm import build_tiny_guidance_model as b; print(b())"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def make_engine(model: Path, scheduler_cls: str | None, max_num_seqs: int = 4):  # noqa: ANN201 - LLMEngine
    from vllm import EngineArgs, LLMEngine

    args = EngineArgs(model=str(model), dtype="float32", max_model_len=512, enforce_eager=True, seed=0,
                      max_num_seqs=max_num_seqs, scheduling_policy="priority",
                      **({"scheduler_cls": scheduler_cls} if scheduler_cls else {}))
    return LLMEngine.from_engine_args(args)


def scheduler_of(engine):  # noqa: ANN001, ANN201 - the engine core's scheduler (in-process core only)
    return engine.engine_core.engine_core.scheduler


@pytest.fixture(scope="session")
def semantic_engine(tiny_model) -> Iterator:
    engine = make_engine(tiny_model, SEMANTIC)
    yield engine
    del engine


@pytest.fixture(scope="session")
def stock_engine(tiny_model) -> Iterator:
    engine = make_engine(tiny_model, None)
    yield engine
    del engine
