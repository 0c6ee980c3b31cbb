"""What the bundled guidance model is taught: for a labelled call, the prompt that carries its protocol's text
(``plan.guidance_prompt``) and, as the answer, that text read out.

The answer is the plan's own sentences, with ``{patient}`` filled for the call: the model learns to read out
the instructions it is given, so whatever protocol the selector (or a dispatcher) picks, the guidance follows
it, and the stream guard can hold each sentence to the protocol. A share of calls is also taught with the
unclear plan of its protocol's family (the family's key questions), as served when the selector is unsure.

    training_pairs(records) -> [(prompt, guidance)]      records: {"transcript", "esi", "protocol"}
    record_prompt(record)   -> the prompt served for a labelled call
    example_records()       -> a few written calls per protocol (the tiny model's corpus, the bench's calls)
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from inference.guidance.plan import GuidancePlan, guidance_prompt, plan_guidance
from judgment.clinical import assess_call, load_catalogue
from judgment.protocols import UNCLEAR, ProtocolLibrary, load_library

WRITTEN_CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "calls" / "written"
UNCLEAR_SHARE = 0.15  # of training calls also taught with their family's unclear plan
EXAMPLES_PER_PROTOCOL = 3


def record_plan(record: dict[str, Any], library: ProtocolLibrary | None = None, unclear: bool = False) -> GuidancePlan:
    """The plan served for a labelled call: its protocol's band for its ESI (or its family's key questions),
    naming the patient as the call's age says."""
    library = library or load_library()
    protocol = library.protocols[record["protocol"]]
    return plan_guidance(library, UNCLEAR if unclear else protocol.id, protocol.family, int(record["esi"]),
                         record_age(record))


def record_age(record: dict[str, Any]) -> float | None:
    """The patient's age in years as labelled, else as the catalogue reads it from the call (None: unknown)."""
    if "patient_age" in record:
        return record["patient_age"]
    patient = assess_call(record["transcript"], load_catalogue())[0].patient
    return patient.age if patient.age_known else None


def record_prompt(record: dict[str, Any], library: ProtocolLibrary | None = None) -> str:
    """The prompt served for a labelled call."""
    return guidance_prompt(record_plan(record, library), record["transcript"])


def reference_guidance(record: dict[str, Any], library: ProtocolLibrary | None = None) -> str:
    """The guidance a call should get: its plan's text."""
    return record_plan(record, library).text


def training_pairs(records: Iterable[dict[str, Any]], seed: int = 0, switched_share: float = 0.0
                   ) -> list[tuple[str, str]]:
    """One (prompt, guidance) pair per record, plus its family's unclear plan for a seeded share of them and,
    for ``switched_share`` of them, another protocol's plan, as after a dispatcher's switch: the guidance is
    the plan in the prompt, whatever the call's words suggest, so the model learns to read the plan out rather
    than to recognise the emergency."""
    library, rng = load_library(), random.Random(seed)
    pairs = []
    for record in records:
        for unclear in (False, True) if rng.random() < UNCLEAR_SHARE else (False,):
            plan = record_plan(record, library, unclear)
            pairs.append((guidance_prompt(plan, record["transcript"]), plan.text))
        if switched_share and rng.random() < switched_share:
            other = library.protocols[rng.choice([p for p in library.ids if p != record["protocol"]])]
            plan = plan_guidance(library, other.id, other.family, int(record["esi"]), record_age(record))
            pairs.append((guidance_prompt(plan, record["transcript"]), plan.text))
    return pairs


def load_written(path: Path = WRITTEN_CORPUS) -> list[dict[str, Any]]:
    return [json.loads(line) for file in sorted(path.glob("*.jsonl"))
            for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def example_records(per_protocol: int = EXAMPLES_PER_PROTOCOL, records: Sequence[dict[str, Any]] | None = None
                    ) -> list[dict[str, Any]]:
    """The first ``per_protocol`` written calls of every protocol, most urgent and least urgent alternately,
    so both ends of each protocol's bands are in."""
    records = load_written() if records is None else records
    out = []
    for protocol in load_library().ids:
        mine = sorted((r for r in records if r["protocol"] == protocol), key=lambda r: (r["esi"], r["id"]))
        ends = [mine[i // 2] if i % 2 == 0 else mine[-1 - i // 2] for i in range(min(per_protocol, len(mine)))]
        out += list({r["id"]: r for r in ends}.values())
    return out


def follows_plan(generated: str, plan: GuidancePlan) -> bool:
    """Whether generated guidance reads the plan out exactly (spacing aside)."""
    return " ".join(generated.split()) == " ".join(plan.text.split())
