"""A pre-screen of a few milliseconds that orders the triage backlog: which waiting calls the classifier sees first.

It never assigns a level (the algorithm and the trained head do); it only decides, when a burst leaves more
calls waiting than one micro-batch takes, which are classified first, so a likely life-threatening call is
not stuck behind a hundred sprained ankles in the triage queue. Its knowledge is the clinical catalogue's: a
concept that alone fires a decision-point-A rule scores 2, one that alone fires a B rule 1, unless concepts.yaml
gives the concept its own ``screen`` weight (warning signs such as "collapsed" or "turning blue"), plus 1 per
alarming vital sign (``judgment.clinical.vitals``). Negation is not read here (a screen may put a denied
finding early; the classifier then decides). Spelling is matched as the catalogue matches it.
"""

from __future__ import annotations

from judgment.clinical import Catalogue, load_catalogue
from judgment.clinical.reader import SCREEN_PIPES, mentions, normalised_text, reader_for
from judgment.clinical.vitals import read_vitals

SCREEN_CHARS = 4000


_WEIGHTS: dict[str, dict[str, int]] = {}  # by catalogue digest


def screen_weights(catalogue: Catalogue) -> dict[str, int]:
    """Concept -> weight: a concept's own ``screen`` value in concepts.yaml, else 2 when it alone fires a
    decision-point-A rule (a rule whose only condition is "any of" concepts), 1 when it alone fires a B rule."""
    if catalogue.digest not in _WEIGHTS:
        weights: dict[str, int] = {}
        for point, weight in (("B", 1), ("A", 2)):
            for rule in catalogue.rules:
                when = rule.when
                if rule.point == point and not (when.all or when.age or when.sex or when.vitals):
                    weights.update({ref.concept: weight for ref in when.any})
        for concept in catalogue.concepts.values():
            if concept.screen is not None:
                weights[concept.id] = concept.screen
        _WEIGHTS[catalogue.digest] = {c: w for c, w in weights.items() if w}
    return _WEIGHTS[catalogue.digest]


def screen_score(transcript: str, catalogue: Catalogue | None = None) -> int:
    """Higher is more likely ESI 1-2: the weights of the concepts the call mentions (each once), plus alarming
    vitals. O(length): the reader's normaliser and concept matcher, without sentences or ConText."""
    catalogue = catalogue or load_catalogue()
    weights = screen_weights(catalogue)
    doc = reader_for(catalogue).read(transcript[:SCREEN_CHARS], pipes=SCREEN_PIPES)
    found = {m.label_ for m in mentions(doc) if m.label_ in weights}
    vitals = read_vitals(normalised_text(doc))
    spo2 = vitals.worst("spo2")
    alarming = {"spo2"} if spo2 is not None and spo2 < catalogue.spo2_below else set()
    for vital, test in catalogue.screen_alarming:  # one point per alarming vital, however many of its tests hold
        value = vitals.worst(vital)
        if value is not None and test(value):
            alarming.add(vital)
    return sum(weights[c] for c in found) + len(alarming)
