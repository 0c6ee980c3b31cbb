"""The vLLM replica's image as compose builds it: the plug-in Dockerfile.vllm installs is the class compose
names, and it is an ``AsyncScheduler`` (a plain ``Scheduler`` subclass would lose CUDA's async scheduling)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT


def _copy_as_dockerfile_vllm_does(into: Path) -> None:
    """Each ``COPY src... dest`` of Dockerfile.vllm, relative to its WORKDIR (here ``into``)."""
    for line in (ROOT / "Dockerfile.vllm").read_text().splitlines():
        if not line.startswith("COPY "):
            continue
        *sources, dest = line.split()[1:]
        for source in sources:
            target = into / dest / Path(source).name if dest.endswith("/") or dest == "./" else into / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(ROOT / source, target)


def test_compose_loads_the_async_plugin_as_dockerfile_vllm_installs_it(tmp_path):
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    command = services["vllm-1"]["command"]
    qualname = command[command.index("--scheduler-cls") + 1]
    source, site = tmp_path / "opt-triage", tmp_path / "site"
    _copy_as_dockerfile_vllm_does(source)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(source)], check=True, cwd=tmp_path)
    module, name = qualname.rsplit(".", 1)
    check = (f"import importlib; from vllm.v1.core.sched.async_scheduler import AsyncScheduler; "
             f"m = importlib.import_module({module!r}); assert m.__file__.startswith({str(site)!r}), m.__file__; "
             f"assert issubclass(m.{name}, AsyncScheduler), m.{name}.__mro__")
    subprocess.run([sys.executable, "-c", check], check=True, cwd=tmp_path, env={"PYTHONPATH": str(site),
                                                                                "PATH": "/usr/bin:/bin"})
