"""The guidance corpus: what the bundled LLM is taught to say for each kind of call.

`fixtures/guidance/guidance.json` holds one entry per scenario: guidance text per severity band
("1-3": ESI 1 to 3), aliases (scenario names other corpora use), transcript keywords and example calls.

    reference_guidance(record) -> str     the guidance for a call record (by scenario and ESI)
    guidance_prompt(transcript) -> str    the exact prompt the model is trained on and served with
    training_pairs(records) -> [(prompt, guidance)]
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

GUIDANCE_FILE = Path(__file__).resolve().parent.parent / "fixtures" / "guidance" / "guidance.json"
FALLBACK_SCENARIO = "other"
PROMPT_PREFIX = "Call: "
PROMPT_SUFFIX = "\nGuidance:"


def guidance_prompt(transcript: str) -> str:
    """The prompt for one call; the model continues it with the guidance and then EOS."""
    return f"{PROMPT_PREFIX}{' '.join(transcript.split())}{PROMPT_SUFFIX}"


@functools.cache
def scenarios() -> dict[str, dict]:
    return json.loads(GUIDANCE_FILE.read_text())["scenarios"]


@functools.cache
def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for key, entry in scenarios().items():
        index[_norm(key)] = key
        for alias in entry.get("aliases", []):
            index.setdefault(_norm(alias), key)
    return index


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def resolve_scenario(scenario: str | None, transcript: str = "") -> str:
    """Our scenario key for a record: its scenario name (or an alias, or a name containing one), else the
    transcript's keywords, else the fallback."""
    index = _alias_index()
    if scenario:
        norm = _norm(scenario)
        if norm in index:
            return index[norm]
        # "cardiac_arrest_child", "fall_elderly_hip": the longest known name the record's name contains.
        contained = [name for name in index if name and re.search(rf"(^|_){name}(_|$)", norm)]
        if contained:
            return index[max(contained, key=len)]
    text = transcript.lower()
    best, best_hits = FALLBACK_SCENARIO, 0
    for key, entry in scenarios().items():
        hits = sum(1 for kw in entry.get("keywords", []) if kw in text)
        if hits > best_hits:
            best, best_hits = key, hits
    return best


def _band_covers(band: str, esi: int) -> bool:
    lo, _, hi = band.partition("-")
    return int(lo) <= esi <= int(hi or lo)


def guidance_for(scenario_key: str, esi: int | None) -> str:
    """The scenario's text for the band covering `esi` (the most urgent band when esi is unknown)."""
    bands = scenarios()[scenario_key]["guidance"]
    if esi is None:
        return bands[min(bands, key=lambda b: int(b.split("-")[0]))]
    for band, text in bands.items():
        if _band_covers(band, int(esi)):
            return text
    # No band covers it: the nearest one.
    return bands[min(bands, key=lambda b: abs(int(b.split("-")[0]) - int(esi)))]


def reference_guidance(record: dict) -> str:
    """The reference guidance for a call record (`scenario`, `esi`, `transcript`; any may be missing)."""
    key = resolve_scenario(record.get("scenario"), record.get("transcript", ""))
    return guidance_for(key, record.get("esi"))


def example_records() -> list[dict]:
    """The corpus' own example calls, as call records (enough to train a model without the call corpus)."""
    out = []
    for key, entry in scenarios().items():
        for i, example in enumerate(entry.get("examples", [])):
            out.append(
                {"id": f"guidance-{key}-{i}", "scenario": key, "esi": example["esi"], "transcript": example["transcript"]}
            )
    return out


def training_pairs(records: Iterable[dict]) -> list[tuple[str, str]]:
    """(prompt, guidance) pairs for training, one per record."""
    return [(guidance_prompt(r["transcript"]), reference_guidance(r)) for r in records]
