"""The dispatch protocol library on disk (fixtures/guidance/), loaded and validated into plain records.

A clinical lead edits the YAML (``library.yaml``: version, sources, families; ``protocols/<id>.yaml``: one
protocol each). The loader refuses a library that the stream guard could not hold the model to: an unknown key,
bands that leave an ESI level uncovered or cover one twice, a text that is not exactly one sentence, a source
that ``library.yaml`` does not list. Each error names the file and the entry.

Every text may say ``{patient}``; :func:`patient_words` fills it for a call ("the patient", "the child", "the
baby"), and the guard accepts any of those fills.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judgment.data_files import ContentCache, check_keys, parse_yaml
from scheduler.config import ESI_LEVELS

REPO_ROOT = Path(__file__).resolve().parents[1]
UNCLEAR = "unclear"  # the selection when the selector is not confident: the family's key questions are read
PATIENT_SLOT = "{patient}"
PATIENT_FILLS = ("the patient", "the child", "the baby")
MAX_SENTENCE_WORDS = 25
# A sentence: no ".", "?" or "!" inside, one at the end; plain ASCII a caller hears read out.
_SENTENCE = re.compile(r"^[A-Za-z0-9 ,'():{}-]+[.?!]$")


class ProtocolLibraryError(ValueError):
    """The protocol library does not validate; the message names the file and the entry."""


AGE_GROUPS = ("baby", "child", "adult", "unknown")  # under 1, 1-15, 16 and over, not said


def age_group(age_years: float | None) -> str:
    """The group a protocol sentence's ``when: {age: ...}`` names: baby under 1, child under 16 (CPR's child
    technique runs to puberty), adult, or unknown when the call does not say."""
    if age_years is None:
        return "unknown"
    return "baby" if age_years < 1 else "child" if age_years < 16 else "adult"


@dataclass(frozen=True)
class Band:
    """What to send and say for the ESI levels ``low``..``high``. ``ages``: per instruction, the age groups it
    is for (all of them when the protocol gives none)."""

    low: int
    high: int
    send: str
    instructions: tuple[str, ...]
    ages: tuple[frozenset[str], ...] = ()

    @property
    def label(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"

    @property
    def sentences(self) -> tuple[str, ...]:
        return (self.send, *self.instructions)

    def sentences_for(self, group: str) -> tuple[str, ...]:
        """The send line and the instructions for a patient of age ``group``: an adult's arrest gets no baby
        compressions, and an unknown age gets the general lines only."""
        ages = self.ages or tuple(frozenset(AGE_GROUPS) for _ in self.instructions)
        return (self.send, *(s for s, groups in zip(self.instructions, ages, strict=True) if group in groups))


@dataclass(frozen=True)
class Protocol:
    id: str
    title: str
    version: int
    family: str
    sources: tuple[str, ...]
    key_questions: tuple[str, ...]
    bands: tuple[Band, ...]

    def band(self, esi: int) -> Band:
        return next(b for b in self.bands if b.low <= esi <= b.high)


@dataclass(frozen=True)
class Family:
    """Protocols that share first questions; read as the guidance when the selection is unclear."""

    id: str
    title: str
    key_questions: tuple[str, ...]
    send: tuple[tuple[int, int, str], ...]  # (low, high, text) by ESI band

    def send_for(self, esi: int) -> str:
        return next(text for low, high, text in self.send if low <= esi <= high)


@dataclass(frozen=True)
class ProtocolLibrary:
    version: str
    digest: str
    sources: Mapping[str, str]
    families: Mapping[str, Family]
    protocols: Mapping[str, Protocol]

    @property
    def label(self) -> str:
        return f"{self.version}+{self.digest[:8]}"

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.protocols))

    def version_of(self, protocol_id: str) -> int | None:
        """The protocol's version; None for "unclear" or an id this library does not hold."""
        protocol = self.protocols.get(protocol_id)
        return protocol.version if protocol else None


def default_library_dir() -> Path:
    return Path(os.environ.get("TRIAGE_PROTOCOLS_DIR", REPO_ROOT / "fixtures" / "guidance"))


_cache: ContentCache[ProtocolLibrary] = ContentCache(lambda path: ProtocolLibraryError(f"{path}: missing"))


def load_library(directory: str | Path | None = None) -> ProtocolLibrary:
    """The library in ``directory`` (default: TRIAGE_PROTOCOLS_DIR or fixtures/guidance), parsed once per
    content: an edited file is picked up by the next call."""
    root = Path(directory) if directory is not None else default_library_dir()
    return _cache.load(root, _files(root), _parse)


def _files(root: Path) -> list[str]:
    if not (root / "library.yaml").is_file():
        raise ProtocolLibraryError(f"{root / 'library.yaml'}: missing")
    protocols = sorted(p.name for p in (root / "protocols").glob("*.yaml"))
    if not protocols:
        raise ProtocolLibraryError(f"{root / 'protocols'}: no protocol files")
    return ["library.yaml", *(f"protocols/{name}" for name in protocols)]


def _parse(texts: dict[str, str], digest: str) -> ProtocolLibrary:
    index = _yaml("library.yaml", texts["library.yaml"])
    _keys("library.yaml", index, {"version", "sources", "families"}, {"version", "sources", "families"})
    sources = {str(k): str(v) for k, v in index["sources"].items()}
    families = {str(k): _family(f"library.yaml: families: {k}", str(k), v) for k, v in index["families"].items()}
    protocols: dict[str, Protocol] = {}
    for name, text in texts.items():
        if name == "library.yaml":
            continue
        protocol = _protocol(name, _yaml(name, text), sources, families)
        if Path(name).stem != protocol.id:
            raise ProtocolLibraryError(f"{name}: id {protocol.id!r} must match the file name")
        protocols[protocol.id] = protocol
    if UNCLEAR in protocols:
        raise ProtocolLibraryError(f"protocols/{UNCLEAR}.yaml: {UNCLEAR!r} is reserved for the unclear selection")
    return ProtocolLibrary(str(index["version"]), digest, sources, families, protocols)


def _family(where: str, family_id: str, entry: Any) -> Family:
    _keys(where, entry, {"title", "key_questions", "send"}, {"title", "key_questions", "send"})
    send = _bands(where, entry["send"])
    return Family(
        family_id, str(entry["title"]), _sentences(f"{where}: key_questions", entry["key_questions"], question=True),
        tuple((low, high, _sentence(f"{where}: send: {low}-{high}", text)) for (low, high), text in send),
    )


def _protocol(name: str, entry: dict[str, Any], sources: Mapping[str, str], families: Mapping[str, Family]) -> Protocol:
    required = {"id", "title", "version", "family", "sources", "key_questions", "bands"}
    _keys(name, entry, required, required)
    if entry["family"] not in families:
        raise ProtocolLibraryError(f"{name}: unknown family {entry['family']!r} (library.yaml lists {', '.join(families)})")
    cited = tuple(str(s) for s in entry["sources"] or ())
    unknown = [s for s in cited if s not in sources]
    if not cited or unknown:
        raise ProtocolLibraryError(f"{name}: sources must name ids from library.yaml (unknown: {unknown or 'none given'})")
    if not isinstance(entry["version"], int) or entry["version"] < 1:
        raise ProtocolLibraryError(f"{name}: version must be a whole number from 1")
    bands = []
    for (low, high), body in _bands(f"{name}: bands", entry["bands"]):
        where = f"{name}: bands: {low}-{high}"
        _keys(where, body, {"send", "instructions"}, {"send", "instructions"})
        instructions, ages = _instructions(f"{where}: instructions", body["instructions"])
        band = Band(low, high, _sentence(f"{where}: send", body["send"]), instructions, ages)
        if len(set(band.sentences)) != len(band.sentences):
            raise ProtocolLibraryError(f"{where}: a sentence is repeated")
        bands.append(band)
    return Protocol(str(entry["id"]), str(entry["title"]), entry["version"], str(entry["family"]), cited,
                    _sentences(f"{name}: key_questions", entry["key_questions"], question=True), tuple(bands))


def _bands(where: str, entry: Any) -> list[tuple[tuple[int, int], Any]]:
    """ESI ranges ("1-2", "3", "4-5") that cover every level exactly once, in order."""
    if not isinstance(entry, Mapping) or not entry:
        raise ProtocolLibraryError(f"{where}: expected a mapping of ESI ranges")
    out, covered = [], []
    for key, body in entry.items():
        match = re.fullmatch(r"\s*([1-5])\s*(?:-\s*([1-5]))?\s*", str(key))
        if not match:
            raise ProtocolLibraryError(f"{where}: {key!r} is not an ESI range such as 1-2 or 3")
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        covered += range(low, high + 1)
        out.append(((low, high), body))
    if sorted(covered) != list(ESI_LEVELS):
        raise ProtocolLibraryError(f"{where}: the ranges must cover ESI 1 to 5 once each (they cover {sorted(covered)})")
    return sorted(out, key=lambda item: item[0])


def _instructions(where: str, items: Any) -> tuple[tuple[str, ...], tuple[frozenset[str], ...]]:
    """Instructions: a sentence, or ``{text: sentence, when: {age: [groups]}}`` for one some patients only."""
    if not isinstance(items, list) or not items:
        raise ProtocolLibraryError(f"{where}: expected a non-empty list of sentences")
    texts, ages = [], []
    for i, item in enumerate(items):
        at = f"{where}: {i + 1}"
        groups = frozenset(AGE_GROUPS)
        if isinstance(item, Mapping):
            _keys(at, item, {"text", "when"}, {"text", "when"})
            _keys(f"{at}: when", item["when"], {"age"}, {"age"})
            named = item["when"]["age"] if isinstance(item["when"]["age"], list) else [item["when"]["age"]]
            unknown = [g for g in named if g not in AGE_GROUPS]
            if not named or unknown:
                raise ProtocolLibraryError(f"{at}: when: age must list groups of {', '.join(AGE_GROUPS)}")
            groups, item = frozenset(named), item["text"]
        texts.append(_sentence(at, item))
        ages.append(groups)
    return tuple(texts), tuple(ages)


def _sentences(where: str, items: Any, question: bool = False) -> tuple[str, ...]:
    if not isinstance(items, list) or not items:
        raise ProtocolLibraryError(f"{where}: expected a non-empty list of sentences")
    out = tuple(_sentence(f"{where}: {i + 1}", text) for i, text in enumerate(items))
    if question and not all(s.endswith("?") for s in out):
        raise ProtocolLibraryError(f"{where}: every key question ends with '?'")
    return out


def _sentence(where: str, text: Any) -> str:
    text = " ".join(str(text).split())
    if not _SENTENCE.match(text):
        raise ProtocolLibraryError(
            f"{where}: {text!r} must be one sentence of plain text (letters, digits, , ' ( ) : -) ending with . ? or !"
        )
    if text.startswith(PATIENT_SLOT) or re.search(r"\{(?!patient\})", text):
        raise ProtocolLibraryError(f"{where}: {text!r}: the only slot is {PATIENT_SLOT}, never at the start")
    if len(text.split()) > MAX_SENTENCE_WORDS:
        raise ProtocolLibraryError(f"{where}: {text!r} has more than {MAX_SENTENCE_WORDS} words")
    return text


def _yaml(name: str, text: str) -> dict[str, Any]:
    return parse_yaml(name, text, ProtocolLibraryError)


def _keys(where: str, entry: Any, allowed: set[str], required: set[str]) -> None:
    check_keys(where, entry, allowed, required, error=ProtocolLibraryError)


def patient_words(age_years: float | None) -> str:
    """How the instructions name the patient: a baby under 1, a child under 16, else "the patient"."""
    if age_years is not None and age_years < 1:
        return "the baby"
    if age_years is not None and age_years < 16:
        return "the child"
    return "the patient"


def fill(text: str, patient: str) -> str:
    return text.replace(PATIENT_SLOT, patient)
