"""requirements.lock (bin/lock) pins every package with its hash, at the versions pyproject.toml pins."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lock_hashes_every_package_at_the_versions_pyproject_pins():
    locked = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+) --hash=sha256:[0-9a-f]{64}", line)
            assert match, line
            locked[_norm(match[1])] = match[2]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = [d for d in project["dependencies"] + extras["test"] + extras["demo"] if "==" in d]
    for pin in pins:
        name, version = re.split(r"==", re.sub(r"\[.*?\]", "", pin).split(";")[0].strip())
        assert locked.get(_norm(name)) == version.strip(), pin
