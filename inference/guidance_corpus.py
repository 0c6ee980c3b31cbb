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
SYNONYMS_FILE = GUIDANCE_FILE.with_name("synonyms.json")
FALLBACK_SCENARIO = "other"
PROMPT_PREFIX = "Call: "
PROMPT_SUFFIX = "\nGuidance:"


def normalise_transcript(transcript: str) -> str:
    """Lower case, no apostrophes, single spaces: "He's NOT breathing" and "hes not breathing" are the same
    words to the model (callers' casing and apostrophes say nothing about the emergency, and hurried typists
    drop both)."""
    return " ".join(re.sub(r"['’`]", "", transcript.lower()).split())


def guidance_prompt(transcript: str) -> str:
    """The prompt for one call; the model continues it with the guidance and then EOS."""
    return f"{PROMPT_PREFIX}{normalise_transcript(transcript)}{PROMPT_SUFFIX}"


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


OPENING_WORDS = 12  # the first 12 words name one scenario and severity band: no two guidance texts share them


def fits_call(guidance: str, record: dict) -> bool:
    """Whether generated guidance is the call's guidance: it opens as the reference guidance does (the opening
    names the scenario and what to send; the rest follows from it)."""
    return guidance.split()[:OPENING_WORDS] == reference_guidance(record).split()[:OPENING_WORDS]


def guidance_fit(records: Iterable[dict], texts: dict[str, str]) -> dict[str, dict]:
    """Share of calls whose generated guidance (``texts`` by record id) fits the call, by split and, within each
    split, by scenario: ``{split: {"calls", "fit", "by_scenario": {scenario: {"calls", "fit"}}}}``."""
    counts: dict[str, dict[str, list[int]]] = {}
    for r in records:
        if r["id"] not in texts:
            continue
        split = counts.setdefault(r.get("split", "train"), {})
        hit = int(fits_call(texts[r["id"]], r))
        for key in ("*", r.get("scenario", "?")):
            tally = split.setdefault(key, [0, 0])
            tally[0] += 1
            tally[1] += hit
    return {
        split: {
            "calls": tallies["*"][0],
            "fit": round(tallies["*"][1] / tallies["*"][0], 4),
            "by_scenario": {k: {"calls": n, "fit": round(h / n, 4)} for k, (n, h) in sorted(tallies.items()) if k != "*"},
        }
        for split, tallies in sorted(counts.items())
    }


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


# --- label-preserving augmentation ---------------------------------------------------------------------------
# A call is a few spoken fragments: the caller's description of the emergency and label-neutral talk around it
# (greetings, apologies, addresses, "the dog's barking"). The augmentation rewrites the talk and recombines the
# description, never the label: every copy keeps its record's scenario and ESI, and borrows description
# fragments only from calls that have the very same reference guidance.
_FRAGMENT_SPLIT = re.compile(r"(?<=[.,!?])\s+")


def _fragments(transcript: str) -> list[str]:
    return [f for f in _FRAGMENT_SPLIT.split(" ".join(transcript.split())) if f]


def _fragment_key(fragment: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", fragment.lower()).strip()


def neutral_fragments(records: list[dict], min_scenarios: int = 3, min_levels: int = 3) -> set[str]:
    """Fragment keys said in calls of at least `min_scenarios` scenarios and `min_levels` ESI levels: they say
    nothing about the guidance (a severity cue is shared by scenarios but not by levels, so it is kept)."""
    scenarios_of: dict[str, set] = {}
    levels_of: dict[str, set] = {}
    for r in records:
        for fragment in _fragments(r["transcript"]):
            key = _fragment_key(fragment)
            scenarios_of.setdefault(key, set()).add(r.get("scenario"))
            levels_of.setdefault(key, set()).add(r.get("esi"))
    return {k for k in scenarios_of if len(scenarios_of[k]) >= min_scenarios and len(levels_of[k]) >= min_levels}


@functools.cache
def _synonym_pattern() -> tuple[re.Pattern, dict[str, tuple[str, ...]]]:
    """One regex over every phrase of fixtures/guidance/synonyms.json (longest first) and each phrase's group."""
    groups = json.loads(SYNONYMS_FILE.read_text())["groups"]
    group_of = {phrase: tuple(group) for group in groups for phrase in group}
    alternation = "|".join(re.escape(p) for p in sorted(group_of, key=len, reverse=True))
    return re.compile(rf"\b(?:{alternation})\b", re.IGNORECASE), group_of


def swap_synonyms(text: str, rng, rate: float) -> str:
    """Each phrase of a synonym group replaced, with probability `rate`, by another phrase of its group."""
    pattern, group_of = _synonym_pattern()

    def swap(match: re.Match) -> str:
        group = group_of[match.group(0).lower()]
        if rng.random() >= rate:
            return match.group(0)
        return rng.choice([p for p in group if p != match.group(0).lower()])

    return pattern.sub(swap, text)


def augmented_records(records: list[dict], copies: int, seed: int, keep: float = 0.8,
                      word_drop: float = 0.1, synonym_rate: float = 0.0) -> list[dict]:
    """`copies` rewritten calls per record, deterministic for `seed`. Each copy keeps each of its description
    fragments with probability `keep` (at least one), perhaps joined by those of another call with the same
    guidance, says a finding in other words with probability `synonym_rate` (fixtures/guidance/synonyms.json),
    drops each word with probability `word_drop`, takes new neutral talk in random places, and sometimes loses
    its punctuation (as a hurried typist writes)."""
    import random

    rng = random.Random(seed)
    records = sorted(records, key=lambda r: r["id"])
    neutral = neutral_fragments(records)
    talk = sorted({f for r in records for f in _fragments(r["transcript"]) if _fragment_key(f) in neutral})
    core_of = {r["id"]: [f for f in _fragments(r["transcript"]) if _fragment_key(f) not in neutral] for r in records}
    by_guidance: dict[str, list[dict]] = {}
    for r in records:
        by_guidance.setdefault(reference_guidance(r), []).append(r)
    out = []
    for r in records:
        peers = by_guidance[reference_guidance(r)]
        for c in range(copies):
            core = list(core_of[r["id"]]) or _fragments(r["transcript"])
            if len(peers) > 1 and rng.random() < 0.5:
                core += core_of[rng.choice(peers)["id"]]
            kept = [f for f in core if rng.random() < keep] or [rng.choice(core)]
            if synonym_rate:
                kept = [swap_synonyms(f, rng, synonym_rate) for f in kept]
            words = [w for f in kept for w in f.split() if rng.random() >= word_drop] or kept[0].split()
            parts = [" ".join(words)]
            for _ in range(rng.randint(0, 3) if talk else 0):
                parts.insert(rng.randint(0, len(parts)), rng.choice(talk))
            text = " ".join(parts)
            if rng.random() < 0.25:
                text = re.sub(r"[.,!?]", "", text)
            out.append({**r, "id": f"{r['id']}~aug{c}", "transcript": text})
    return out
