"""Free text to findings: the patient, the vital signs, and every catalogue concept the caller mentions, with one
assertion per concept for the call (present, possible, denied, resolved, past, hypothetical, someone else's,
only asked about).

Steps: read the call with the medspaCy pipeline (``reader``: normalise, sentences, concept matching, ConText),
assert each mention (``assertion``), add what each mention implies ("crushing chest pain" -> chest pain) and
what a denied or doubted normal state means ("I don't think he's breathing" -> not breathing, possibly), as
mentions at the same place, and keep each concept's latest assertion (``assertion.call_assertions``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from spacy.tokens import Doc

from .assertion import (
    CURRENT,
    HISTORICAL,
    NEGATED,
    POSSIBLE,
    PRESENT,
    RESOLVED,
    Assertion,
    assert_mention,
    call_assertions,
    resolve_told_of_it,
)
from .catalogue import PERSISTENT_KINDS, Catalogue, ConceptRef
from .patient import Patient, describe_patient
from .reader import mentions, normalised_text, reader_for
from .vitals import Vitals, read_vitals


@dataclass(frozen=True)
class Finding:
    concept: str
    status: str
    uncertain: bool
    words: str  # what the caller said ("isn't breathing")
    derived: bool = False  # from an opposite or an implication, not matched directly
    corrected: bool = False  # rests on a spelling correction: supports, never decides A or B
    start: int | None = None  # character offsets of the words in the transcript
    end: int | None = None


@dataclass(frozen=True)
class Findings:
    patient: Patient
    vitals: Vitals
    items: tuple[Finding, ...]  # one per concept

    def statuses(self, concept: str) -> set[str]:
        return {f.status for f in self.items if f.concept == concept}

    def holds(self, ref: ConceptRef) -> bool:
        return any(f.concept == ref.concept and f.status in ref.statuses for f in self.items)

    def without_corrections(self) -> Findings:
        """The findings that rest on what the caller wrote, not on a spelling correction."""
        return replace(self, items=tuple(f for f in self.items if not f.corrected))


def extract_findings(transcript: str, catalogue: Catalogue) -> Findings:
    return findings_of(reader_for(catalogue).read(transcript), catalogue)


def extract_many(transcripts: Sequence[str], catalogue: Catalogue) -> list[Findings]:
    return [findings_of(doc, catalogue) for doc in reader_for(catalogue).read_many(transcripts)]


def findings_of(doc: Doc, catalogue: Catalogue) -> Findings:
    normal = frozenset(c.id for c in catalogue.concepts.values() if c.kind == "normal")
    text = normalised_text(doc)
    patient = describe_patient(text)
    said = resolve_told_of_it(doc, [_negated_history(assert_mention(span, normal, patient.caller_is_patient),
                                                     catalogue) for span in mentions(doc)], normal)
    derived = _opposites(said, catalogue)
    derived += _implied([*said, *derived], catalogue)
    opposites = {c.id: c.opposite for c in catalogue.concepts.values() if c.opposite}
    resolves = {c.id: c.resolves for c in catalogue.concepts.values() if c.resolves}
    merged = call_assertions([*said, *derived, *_stopped(said, catalogue)], opposites, resolves)
    items = [Finding(a.concept, a.status, a.uncertain, a.words, a.derived, a.corrected, a.start, a.end)
             for a in sorted(merged.values(), key=lambda a: (a.position, a.concept))]
    vitals = read_vitals(text)
    items += _measured(vitals, merged, catalogue)
    return Findings(patient, vitals, tuple(items))


def _measured(vitals: Vitals, merged: dict[str, Assertion], catalogue: Catalogue) -> list[Finding]:
    """A finding a reading shows ("temperature's 39.4" is a fever), when the words did not assert it."""
    out: list[Finding] = []
    for concept, vital, test in catalogue.measured:
        values = getattr(vitals, vital)
        if not values or concept in merged or any(f.concept == concept for f in out):
            continue  # what the caller said of it stands
        value = min(values) if test(float("-inf")) else max(values)  # a low alarm reads the lowest value
        if test(value):
            out.append(Finding(concept, PRESENT, False, f"{vital.split('_')[0]} {value:g}", derived=True))
    return out


def _negated_history(assertion: Assertion, catalogue: Catalogue) -> Assertion:
    """A symptom denied in the past ("he's never fainted before") is a history, not a denial now; a risk factor
    denied in the past ("no history of diabetes") is denied. (A risk told in the past tense stays historical and
    counts as a risk now: ``catalogue.PERSISTENT_KINDS``.)"""
    persistent = catalogue.concepts[assertion.concept].kind in PERSISTENT_KINDS
    if assertion.status == NEGATED and HISTORICAL in assertion.categories and not persistent:
        return replace(assertion, status=HISTORICAL)
    return assertion


def _stopped(said: list[Assertion], catalogue: Catalogue) -> list[Assertion]:
    """A finding resolved by a later "it's stopped" is also the finding that says so ("it was bleeding a lot ...
    it's stopped" -> bleeding stopped), where the catalogue has one (a finding that ``resolves`` it)."""
    out = []
    for a in said:
        if a.status == RESOLVED and "RESOLVED_PREVIOUS" in a.categories:
            for concept in catalogue.concepts.values():
                if concept.kind == "finding" and a.concept in concept.resolves:
                    out.append(replace(a, concept=concept.id, status=PRESENT, derived=True))
    return out


def _opposites(assertions: Iterable[Assertion], catalogue: Catalogue) -> list[Assertion]:
    """A denied or doubted normal state is its opposite: "not sure he's breathing" -> possibly not breathing;
    a finding stated as there denies the normal state it is the opposite of ("he's not breathing" -> breathing
    normally, denied)."""
    normal_of = {c.opposite: c.id for c in catalogue.concepts.values() if c.kind == "normal" and c.opposite}
    out = []
    for a in assertions:
        if a.status == PRESENT and not a.derived and not a.uncertain and a.concept in normal_of:
            out.append(replace(a, concept=normal_of[a.concept], status=NEGATED, derived=True))
        opposite = catalogue.concepts[a.concept].opposite
        if opposite is None:
            continue
        doubted = a.status in CURRENT and (a.status == POSSIBLE or a.uncertain)
        if a.status == NEGATED or doubted:
            status = POSSIBLE if a.uncertain or a.status == POSSIBLE else PRESENT
            out.append(replace(a, concept=opposite, status=status, uncertain=status == POSSIBLE, derived=True))
    return out


def _implied(assertions: Iterable[Assertion], catalogue: Catalogue) -> list[Assertion]:
    """What each mention implies, transitively, with its status, at its place ("crushing chest pain" -> chest
    pain)."""
    out: list[Assertion] = []
    frontier = list(assertions)
    seen = {(a.concept, a.position) for a in frontier}
    while frontier:
        a = frontier.pop()
        for implied in catalogue.concepts[a.concept].implies:
            if (implied, a.position) not in seen:
                seen.add((implied, a.position))
                derived = replace(a, concept=implied, derived=True)
                out.append(derived)
                frontier.append(derived)
    return out


__all__ = ["Finding", "Findings", "extract_findings", "extract_many", "findings_of", "PRESENT", "POSSIBLE"]
