"""What the LLM is asked to say for one call: the selected protocol's text for the call's severity band (or,
when the selection is unclear, the family's key questions), and the prompt that carries it.

The prompt is plain text an instruction model reads unchanged (``INFERENCE_MODEL``); the bundled model is
trained on exactly this format (``training.guidance_llm``) to reproduce the instructions it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from judgment.protocols import UNCLEAR, ProtocolLibrary, age_group, fill, patient_words

ASK = "Ask the caller these questions."
# The call's opening, in the prompt: a plan's text reaches ~230 tokens and the guidance reads it out again, and
# every prompt token is paid for in training and prefill; 95 % of the written calls are shorter than this.
MAX_CALL_CHARS = 500


@dataclass(frozen=True)
class GuidancePlan:
    protocol: str  # a protocol id, or "unclear"
    protocol_version: int | None  # None when unclear
    family: str
    band: str  # the ESI range whose text is read: "1-2", "3", "1-5"
    sentences: tuple[str, ...]  # the instructions, {patient} filled for this call
    library_version: str
    template: tuple[str, ...] = ()  # the same sentences as the library writes them ({patient} unfilled)
    brief: bool = False  # key questions only (``brief_plan``): a surge's first degradation step

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def plan_guidance(
    library: ProtocolLibrary, protocol: str, family: str, esi: int, age_years: float | None = None
) -> GuidancePlan:
    """The protocol's band for ``esi``, its sentences for the patient's age group (``age_years`` None: not said,
    the general lines only); for ``unclear``, the send line and key questions of ``family``."""
    patient = patient_words(age_years)
    if protocol == UNCLEAR:
        fam = library.families[family]
        sentences = (fam.send_for(esi), ASK, *fam.key_questions)
        return GuidancePlan(UNCLEAR, None, family, str(esi), tuple(fill(s, patient) for s in sentences),
                            library.label, sentences)
    chosen = library.protocols[protocol]
    band = chosen.band(esi)
    sentences = band.sentences_for(age_group(age_years))
    return GuidancePlan(chosen.id, chosen.version, chosen.family, band.label,
                        tuple(fill(s, patient) for s in sentences), library.label, sentences)


def brief_plan(library: ProtocolLibrary, plan: GuidancePlan, esi: int, age_years: float | None = None) -> GuidancePlan:
    """Key questions only: the family's send line and key questions in place of the protocol's band, the first
    step of degrading a less urgent call's guidance in a surge (issue 30); the protocol is kept, so the call's
    records and a later full generation still name it. A plan that is key questions already is returned as is."""
    if plan.protocol == UNCLEAR or plan.family not in library.families:
        return plan
    fam = library.families[plan.family]
    template = (fam.send_for(esi), ASK, *fam.key_questions)
    patient = patient_words(age_years)
    return GuidancePlan(plan.protocol, plan.protocol_version, plan.family, plan.band,
                        tuple(fill(s, patient) for s in template), plan.library_version, template, brief=True)


def normalise_transcript(transcript: str) -> str:
    """Lower case, no apostrophes, single spaces: casing and apostrophes say nothing about the emergency, and
    hurried typists drop both."""
    return " ".join(re.sub(r"['’`]", "", transcript.lower()).split())


def guidance_prompt(plan: GuidancePlan, transcript: str) -> str:
    """The prompt for one call; the model continues it with the guidance and then EOS."""
    name = f"{plan.protocol} v{plan.protocol_version}" if plan.protocol_version else f"{UNCLEAR} ({plan.family})"
    return (
        f"Protocol: {name}, ESI {plan.band}\n"
        f"Instructions: {plan.text}\n"
        f"Call: {normalise_transcript(transcript)[:MAX_CALL_CHARS]}\n"
        "Guidance:"
    )
