"""The serving path of the triage predictors: a batch of transcripts in, one verdict per call out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from judgment.clinical import Catalogue, Findings

    from .esi import EsiClassifier
    from .length import LengthPredictor
    from .ngrams import NgramVectoriser
    from .protocol import ProtocolChoice, ProtocolClassifier


@dataclass(frozen=True)
class TriagePrediction:
    esi: int
    probabilities: tuple[float, float, float, float, float]
    predicted_output_tokens: int
    decision_point: str = "C"  # A | B | C | D: the ESI decision point that decided ``esi``
    reasons: tuple[str, ...] = ()  # "B: fever during chemotherapy", "D: SpO2 89% (danger zone < 92%)"
    uncertain: bool = False  # algorithm and model disagree, or the probability mass is split
    alternative_esi: int | None = None  # uncertain: the other level a signal gave (judgement.Judgement)
    findings: tuple[str, ...] = ()  # what the caller said, as findings ("not breathing", "no fever")
    protocol: ProtocolChoice | None = None  # the dispatch protocol selected, with confidence and runner-up
    patient_age: float | None = None  # years: stated, else the age group's; None when the call does not say


class TriagePredictor:
    """ESI level with its decision point and reasons, class probabilities and predicted guidance length for a
    batch of transcripts."""

    def __init__(
        self,
        *,
        vectoriser: NgramVectoriser,
        esi: EsiClassifier,
        length: LengthPredictor,
        protocol: ProtocolClassifier,
        catalogue: Catalogue,
        version: str,
    ) -> None:
        self.vectoriser = vectoriser
        self.esi = esi
        self.length = length
        self.protocol = protocol
        self.catalogue = catalogue
        self.version = version

    @property
    def catalogue_version(self) -> str:
        return self.catalogue.label

    @cached_property
    def _terms(self) -> tuple[str, ...]:
        """The n-gram vocabulary in column order, for the evidence a reason quotes."""
        return tuple(sorted(self.vectoriser.vocabulary, key=self.vectoriser.vocabulary.__getitem__))

    def predict(self, transcripts: Sequence[str]) -> list[TriagePrediction]:
        """The algorithm per call, the three heads on one set of inputs, the judgement. Output order follows the
        input; a call's prediction does not depend on the rest of its batch."""
        from .clinical_features import assess_calls, columns
        from .judgement import judge
        from .ngrams import CallInputs

        texts = [str(t) for t in transcripts]
        if not texts:
            return []
        findings, results, active = assess_calls(texts, self.catalogue)
        names = self.esi.feature_names
        inputs = CallInputs(tuple(self.vectoriser.rows(texts)), self.vectoriser.dim, columns(active, names), len(names))
        probabilities = self.esi.probabilities(inputs)  # pure functions of the inputs: safe across threads
        protocols = self.protocol.choices(self.protocol.probabilities(inputs))
        tokens = self.length.predict(inputs)
        levels = self.esi.levels(probabilities)
        out = []
        labels = {c.id: c.label for c in self.catalogue.concepts.values()}
        rows = zip(probabilities.tolist(), levels, results, findings, tokens, protocols, inputs.ngrams, strict=True)
        for row, level, result, found, n, protocol, grams in rows:
            verdict = judge(row, level, result, labels=labels, evidence=self.esi.evidence(grams, level, self._terms))
            out.append(TriagePrediction(
                esi=verdict.esi, probabilities=_five(row), predicted_output_tokens=int(n),
                decision_point=verdict.decision_point, reasons=verdict.reasons, uncertain=verdict.uncertain, alternative_esi=verdict.alternative,
                findings=describe_findings(found, self.catalogue), protocol=protocol,
                patient_age=found.patient.age if found.patient.age_known else None,
            ))
        return out


def describe_findings(findings: Findings, catalogue: Catalogue) -> tuple[str, ...]:
    """Each concept asserted for the patient now, once, in the catalogue's words: "not breathing", "possibly:
    no pulse". Denied, resolved, past, someone else's and hypothetical findings are not shown."""
    out: dict[str, None] = {}
    for f in findings.items:
        label = catalogue.concepts[f.concept].label
        if f.status == "present":
            out[label] = None
        elif f.status == "possible":
            out[f"possibly: {label}"] = None
    return tuple(out)


def _five(row: Sequence[float]) -> tuple[float, float, float, float, float]:
    a, b, c, d, e = (float(x) for x in row)
    return (a, b, c, d, e)
