"""The protocol library as data: a protocol for every chief complaint we label, each band covering the ESI
levels once, and a broken edit refused with its place named."""

import json
import shutil
from pathlib import Path

import pytest

from inference.guidance.plan import plan_guidance
from judgment.protocols import ProtocolLibraryError, default_library_dir, load_library, patient_words

REPO = Path(__file__).resolve().parents[2]


def _labelled_protocols() -> set[str]:
    ids = set()
    for path in [*(REPO / "fixtures" / "evaluation").glob("*/*.jsonl"), *(REPO / "fixtures/calls/written").glob("*.jsonl")]:
        ids |= {json.loads(line)["protocol"] for line in path.read_text().splitlines() if line.strip()}
    return ids


def test_the_library_has_a_cited_protocol_for_every_chief_complaint_the_calls_are_labelled_with():
    library = load_library()
    assert len(library.protocols) >= 30
    assert _labelled_protocols() <= set(library.protocols)
    for protocol in library.protocols.values():
        assert protocol.sources and set(protocol.sources) <= set(library.sources)
        assert protocol.family in library.families
        assert [level for band in protocol.bands for level in range(band.low, band.high + 1)] == [1, 2, 3, 4, 5]


def test_every_family_has_key_questions_and_a_send_line_for_every_level():
    for family in load_library().families.values():
        assert family.key_questions and all(q.endswith("?") for q in family.key_questions)
        assert all(family.send_for(level) for level in range(1, 6))


@pytest.fixture
def editable(tmp_path):
    directory = tmp_path / "guidance"
    shutil.copytree(default_library_dir(), directory)
    return directory


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        ("protocols/choking.yaml", '"3-5":', '"4-5":', "cover ESI 1 to 5 once each"),
        ("protocols/choking.yaml", "sources: [rcuk-2021,", "sources: [made-up,", "unknown: ['made-up']"),
        ("protocols/choking.yaml", "Stay on the line and tell me what happens.",
         "Stay on the line. Tell me what happens.", "must be one sentence"),
        ("protocols/choking.yaml", "- Stay on the line and tell me what happens.", "- '{patient} must stay calm.'",
         "never at the start"),
        ("protocols/choking.yaml", "family: cardiorespiratory", "family: lungs", "unknown family 'lungs'"),
    ],
)
def test_a_broken_edit_is_refused_naming_the_file_and_entry(editable, file, old, new, message):
    path = editable / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ProtocolLibraryError, match=file.split("/")[-1]) as error:
        load_library(editable)
    assert message in str(error.value)


def test_an_edited_protocol_is_picked_up_by_the_next_load(editable):
    before = load_library(editable)
    path = editable / "protocols" / "choking.yaml"
    version = before.protocols["choking"].version
    path.write_text(path.read_text().replace(f"version: {version}", f"version: {version + 1}", 1))
    after = load_library(editable)
    assert after.protocols["choking"].version == version + 1 and after.digest != before.digest


def test_an_instruction_for_some_ages_reaches_only_those_patients():
    library = load_library()
    adult, baby, unknown = (plan_guidance(library, "cardiac_arrest", "cardiorespiratory", 1, age).text
                            for age in (40, 0.5, None))
    assert "two fingers" in baby and "two fingers" not in adult and "5 to 6 centimetres" in adult
    assert "two fingers" not in unknown and "one or two hands" not in unknown
    assert "5 to 6 centimetres" not in baby


def test_no_evaluation_calls_guidance_holds_a_sentence_for_another_age_group():
    """Every labelled evaluation call's plan, as served (the age read from the call, None when it says none)."""
    from judgment.protocols import AGE_GROUPS, age_group
    from training.guidance_corpus import record_age, record_plan

    library = load_library()
    conditioned = {s: groups for p in library.protocols.values() for b in p.bands
                   for s, groups in zip(b.instructions, b.ages, strict=True) if groups != frozenset(AGE_GROUPS)}
    records = [json.loads(line) for path in sorted((REPO / "fixtures" / "evaluation").glob("*/*.jsonl"))
               for line in path.read_text().splitlines() if line.strip()]
    checked = 0
    for record in records:
        plan = record_plan(record, library)
        group = age_group(record_age(record))
        for template in plan.template:
            if template in conditioned:
                checked += 1
                assert group in conditioned[template], (record["id"], template)
    assert checked > 0


def test_the_patient_is_named_by_age():
    assert [patient_words(a) for a in (0.5, 7, 40, None)] == ["the baby", "the child", "the patient", "the patient"]
