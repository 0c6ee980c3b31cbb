"""YAML data a clinical lead edits (the clinical catalogue, the protocol library): read, checked, and parsed once
per content.

``ContentCache.load`` re-reads nothing while the files' sizes and modification times are unchanged, so an edit is
picked up by the next load and an unchanged library costs a few ``stat`` calls. ``parse_yaml`` and
``check_keys`` raise the caller's error type with the file and entry named.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

T = TypeVar("T")


class ContentCache(Generic[T]):
    """Parsed data by directory and content."""

    def __init__(self, missing: Callable[[Path], Exception]) -> None:
        self._missing = missing  # the error for a file that is not there
        self._by_content: dict[tuple[Path, str], T] = {}
        self._by_stamp: dict[tuple, T] = {}
        self._lock = threading.Lock()

    def load(self, root: Path, names: Sequence[str], parse: Callable[[dict[str, str], str], T]) -> T:
        """``parse(texts by name, sha256 of the texts)`` for the files ``names`` under ``root``, once per content."""
        stamp = _stamp(root, names)
        with self._lock:
            if stamp is not None and stamp in self._by_stamp:
                return self._by_stamp[stamp]
        texts = {}
        for name in names:
            path = root / name
            if not path.is_file():
                raise self._missing(path)
            texts[name] = path.read_text(encoding="utf-8")
        digest = hashlib.sha256("\0".join(texts[n] for n in names).encode()).hexdigest()
        with self._lock:
            key = (root.resolve(), digest)
            if key not in self._by_content:
                self._by_content[key] = parse(texts, digest)
            if stamp is not None:
                self._by_stamp[stamp] = self._by_content[key]
            return self._by_content[key]


def _stamp(root: Path, names: Sequence[str]) -> tuple | None:
    """The files' sizes and modification times: unchanged files need not be read and hashed again."""
    try:
        return (str(root.resolve()), *((p.stat().st_mtime_ns, p.stat().st_size) for p in (root / n for n in names)))
    except OSError:
        return None


# libyaml's C parser where PyYAML was built with it (the wheels are): the catalogue parses ten times faster.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(name: str, text: str, error: type[Exception]) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise error(f"{name}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise error(f"{name}: expected a mapping at the top")
    return data


def check_keys(
    where: str, entry: Any, allowed: set[str], required: set[str] = frozenset(), *, error: type[Exception]
) -> None:
    if not isinstance(entry, Mapping):
        raise error(f"{where}: expected a mapping, got {type(entry).__name__}")
    unknown = set(entry) - allowed
    if unknown:
        raise error(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    missing = required - set(entry)
    if missing:
        raise error(f"{where}: missing key(s) {', '.join(sorted(missing))}")
