"""What the caller asserts of each mention, and of each concept for the whole call.

A mention's assertion comes from the ConText modifiers that reach it (``reader``), or, inside a call-taker's
question, from the caller's answer ("Is he breathing? - No" denies breathing; an unanswered question asserts
nothing). A concept's assertion for the call is its latest mention's: callers correct themselves and states
change during a call ("he was pouring blood ... it's stopped now"). A later statement of the opposite normal
state, or of a concept that ``resolves`` it, makes an earlier current finding resolved ("he wasn't breathing
... he's breathing now", "a lot of blood ... stopped with a towel pressed on it"). So every concept has exactly
one assertion per call. Pure functions of the read Doc and the catalogue: O(mentions * modifiers).

A concept's assertion for the call is what holds for the patient now: among the mentions about now (present,
possible, resolved, denied), a finding said to be there is there, unless a later mention says it has stopped
(a denial does not outweigh it: "stung by a wasp ... we didn't give the EpiPen" denies the pen, not the
reaction, and errs toward the more urgent reading); without any, the latest other mention (the past, someone
else, a hypothetical, an unanswered question).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from spacy.tokens import Doc, Span

PRESENT, POSSIBLE = "present", "possible"
NEGATED, RESOLVED, HISTORICAL = "negated", "resolved", "historical"
HYPOTHETICAL, OTHER_PERSON, QUESTION = "hypothetical", "other_person", "question"
CURRENT = frozenset({PRESENT, POSSIBLE})
STATUSES = (PRESENT, POSSIBLE, NEGATED, RESOLVED, HISTORICAL, HYPOTHETICAL, OTHER_PERSON, QUESTION)
# When modifiers of several categories reach one mention, the first of these wins.
PRECEDENCE = (HYPOTHETICAL, NEGATED, OTHER_PERSON, HISTORICAL, RESOLVED, POSSIBLE)  # "if he doesn't wake up"
FROM_CONTEXT = {
    "NEGATED_EXISTENCE": NEGATED, "POSSIBLE_EXISTENCE": POSSIBLE, "HISTORICAL": HISTORICAL,
    "HYPOTHETICAL": HYPOTHETICAL, "FAMILY": OTHER_PERSON, "RESOLVED": RESOLVED,
}
YES = frozenset({"yes", "yeah", "yep", "yup", "aye", "correct", "definitely", "affirmative"})
NO = frozenset({"no", "nope", "nah", "naw", "not", "negative"})
HEDGED_YES = frozenset({"maybe", "probably", "possibly", "perhaps"})
CERTAINLY = frozenset({"definitely", "definately", "absolutely", "certainly", "really"})  # "... not" is a no
FILLERS = frozenset({"um", "umm", "uh", "erm", "er", "err", "well", "oh", "ah", "hmm"})
REPORTED = frozenset({"says", "said", "say"})  # an interpreter's or a relative's "she says no"
STATEMENT_TOKENS = 2  # a bare word ("breathing") names a state; only a statement ("he's breathing") resolves one
NOW = frozenset({PRESENT, POSSIBLE, RESOLVED, NEGATED})
ANSWERED = "answered"  # in ``Assertion.categories``: the status is the caller's yes or no to a question
QUESTION_PART_BREAKS = frozenset({",", ";", "or", "and"})  # "Any chest pain, trouble breathing, or a faint?"
QUESTION_OPENERS = frozenset({
    "is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could", "will", "would", "any",
    "anything", "what", "where", "how", "when", "who", "which", "why", "should", "shall", "may", "might", "and",
    "so", "okay", "ok", "right", "ever", "not"})
LIST_PART_WORDS = 2
SUBORDINATE = frozenset({"when", "while", "if", "after", "before", "because", "since", "until", "whenever"})


@dataclass(frozen=True)
class Assertion:
    """One mention of a concept, or a mention derived from one (an implication, an opposite)."""

    concept: str
    status: str
    uncertain: bool  # a hedged denial or assertion ("I don't think he's breathing")
    start: int  # character offsets in the transcript
    end: int
    position: int  # token index: the order of what was said
    words: str
    corrected: bool = False  # the mention rests on a spelling correction
    derived: bool = False
    statement: bool = True  # a statement of the state, not a bare word
    categories: frozenset[str] = frozenset()  # every ConText category that reached the mention


def assert_mention(span: Span, normal: frozenset[str] = frozenset(), caller_is_patient: bool = False) -> Assertion:
    """The status of one mention (``span``, labelled with its concept) from its modifiers or the answer to it.
    ``normal``: the concepts that are normal states ("breathing"), whose denial means a finding.
    ``caller_is_patient``: cues that hold only then apply ("my dad had a heart attack at 50" from a caller
    telling of their own chest pain is someone else's; from a caller about their dad it is the patient's)."""
    status, uncertain, categories = _status(span, normal, caller_is_patient)
    return Assertion(
        span.label_, status, uncertain, span.start_char, span.end_char, span.start, span.text,
        corrected=any(t._.corrected for t in span), statement=len(span) >= STATEMENT_TOKENS,
        categories=categories,
    )


def _status(span: Span, normal: frozenset[str], caller_is_patient: bool) -> tuple[str, bool, frozenset[str]]:
    found = [(FROM_CONTEXT[m.category], m) for m in span._.modifiers if m.category in FROM_CONTEXT
             and (caller_is_patient or not (m.rule.metadata or {}).get("when_caller_is_patient"))]
    parts = _question_parts(span)
    if parts is not None and not any(status == HYPOTHETICAL for status, _ in found):
        # "What if he stops breathing?", "Should we start CPR?": a worry or a plan, not a question about now
        status = _answered(span, parts, normal)
        return status, False, frozenset() if status == QUESTION else frozenset({ANSWERED})
    found = [(s, m) for s, m in found if not (m.rule.metadata or {}).get("with_negation")] + [
        (s, m) for s, m in found if (m.rule.metadata or {}).get("with_negation")
        and any(other == NEGATED for other, _ in found)]
    if not found:
        return PRESENT, False, frozenset()
    categories = frozenset(status for status, _ in found)
    winner = min(categories, key=PRECEDENCE.index)
    uncertain = POSSIBLE in categories or any(
        status == winner and (m.rule.metadata or {}).get("uncertain") for status, m in found)
    return winner, uncertain, categories


def _answered(span: Span, parts: list[Span], normal: frozenset[str]) -> str:
    """A question's mention takes the caller's yes or no when it is what the question asks about (the first
    finding of its part, not one in a clause inside it: "Is she making a noise when she breathes in?" - "No"
    denies the noise). When a question asks about several things, "yes" answers its last part; "no" answers
    every part but a normal state outside the last one ("Is she breathing normally, any swelling? - No" does
    not say she is not breathing)."""
    part = next(p for p in parts if p.start <= span.start < p.end)
    if not _is_predicate(span, part):
        return QUESTION
    answer = _answer_after(span.sent)
    if answer is None:
        return QUESTION
    last = part is parts[-1]
    if len(parts) == 1 or last or (answer == NEGATED and span.label_ not in normal):
        return answer
    if answer == PRESENT and _joined_by_and(span.doc, parts):
        return answer  # "Is he awake and breathing okay? - Yes": yes to both
    return QUESTION


def _joined_by_and(doc: Doc, parts: list[Span]) -> bool:
    return all(doc[p.end].lower_ == "and" for p in parts[:-1] if p.end < len(doc))


def _question_parts(span: Span) -> list[Span] | None:
    """The parts of the question the mention is in, or None when it is not in one. A sentence that opens like
    a question ("Is he...", "Any chest pain, trouble breathing, or...?") is a question throughout; otherwise
    only its last clause is ("There's a moth in my ear, where do I go?" asks nothing of the moth). Parts are
    split at commas and at "or"/"and"."""
    sentence = span.sent
    words = [t for t in sentence if not t.is_space and not t.is_punct]
    marks = [t for t in sentence if not t.is_space and (not t.is_punct or t.text == "?")]
    if not words or marks[-1].text != "?":  # "Is he drowsy at all? /" is a question too
        return None
    doc, mark = span.doc, marks[-1].i
    start = sentence.start
    breaks = [i for i in range(sentence.start, mark) if doc[i].text in (",", ";", ":")]
    if words[0].lower_ not in QUESTION_OPENERS and not _list_of_words(doc, sentence.start, breaks, mark):
        start = breaks[-1] + 1 if breaks else sentence.start
    if not start <= span.start < mark:
        return None
    cuts = [i for i in range(start, mark) if doc[i].lower_ in QUESTION_PART_BREAKS]
    bounds = [start, *(c + 1 for c in cuts), mark + 1]
    parts = [doc[a:b - 1] if b - 1 > a else doc[a:a] for a, b in zip(bounds, bounds[1:], strict=False)]
    parts = [p for p in parts if len(p)]
    return parts if any(p.start <= span.start < p.end for p in parts) else None


def _list_of_words(doc: Doc, start: int, breaks: list[int], mark: int) -> bool:
    """A question that is a list of a few words each ("Sweaty, clammy?", "Any pain, sick?"): every part asks."""
    bounds = [start - 1, *breaks, mark]
    return bool(breaks) and all(sum(1 for t in doc[a + 1:b] if not t.is_punct) <= LIST_PART_WORDS
                                for a, b in zip(bounds, bounds[1:], strict=False))


def _is_predicate(span: Span, part: Span) -> bool:
    doc = span.doc
    return not any(doc[i].lower_ in SUBORDINATE for i in range(part.start, span.start)) and not any(
        part.start <= m.start and m.end <= span.start for m in doc.spans.get("concepts", []))


def _answer_after(sentence: Span) -> str | None:
    """The caller's answer to a question, as the status it gives: yes is ``PRESENT``, no ``NEGATED``, a hedged
    yes ("I think so", "maybe") ``POSSIBLE``, "a bit" ``PRESENT``; read from the first word of what follows, past
    a speaker tag, a filler ("um", "well") and an interpreter's "she says"; "definitely not" and "not really"
    are a no."""
    doc: Doc = sentence.doc
    i = sentence.end
    while i < len(doc):
        if i + 1 < len(doc) and doc[i].is_alpha and doc[i + 1].norm_ in REPORTED:
            i += 2  # "she says"
        elif (doc[i].is_punct or doc[i].is_space or doc[i].norm_ in FILLERS
              or (i + 1 < len(doc) and doc[i + 1].text == ":")):
            i += 1
        else:
            break
    if i >= len(doc):
        return None
    word, following = doc[i].norm_, doc[i + 1].norm_ if i + 1 < len(doc) else ""
    if word in HEDGED_YES or (word == "i" and following in ("think", "guess") and i + 2 < len(doc)
                              and doc[i + 2].norm_ == "so"):
        return POSSIBLE
    if (word in YES or word in CERTAINLY) and following == "not":
        return NEGATED
    if word in YES or (word in ("a", "bit", "little") and (following in ("bit", "little") or word != "a")):
        return PRESENT
    if word in NO:
        return NEGATED
    return None


def resolve_told_of_it(doc: Doc, assertions: list[Assertion], normal: frozenset[str] = frozenset()) -> list[Assertion]:
    """"It's stopped", "nothing since", "that's settled": a resolution told of "it", across a clause break or
    a "but", ends the finding said last before it in the same sentence ("it was bleeding a lot but I've had a
    towel pressed on it for ten minutes and it's stopped"), with every finding read in the same words ("a lot
    of blood" is a bleed and a heavy one). "It" is a problem, never a normal state (``normal``): "had a fit, it
    lasted a minute and it's stopped now" ends the fit, not the minute."""
    graph = doc._.context_graph
    out = list(assertions)
    for modifier in (graph.modifiers if graph is not None else ()):
        if modifier.category != "RESOLVED_PREVIOUS":
            continue
        start = modifier.modifier_span[0]
        sentence = doc[start].sent
        before = [i for i, a in enumerate(out) if sentence.start <= a.position < start and a.status in CURRENT
                  and not a.derived and a.concept not in normal]
        if before:
            last = max(before, key=lambda i: (out[i].position, out[i].start))
            for i in before:
                if out[i].end > out[last].start:  # the last mention, and those that overlap it
                    out[i] = replace(_resolved(out[i]), categories=out[i].categories | {"RESOLVED_PREVIOUS"})
    return out


def call_assertions(assertions: list[Assertion], opposites: dict[str, str], resolves: dict[str, tuple[str, ...]]
                    ) -> dict[str, Assertion]:
    """One assertion per concept (the module docstring), then resolution by a later statement of the opposite
    normal state or of a resolving concept."""
    by_concept: dict[str, list[Assertion]] = {}
    for a in sorted(assertions, key=lambda a: (a.position, a.derived)):
        by_concept.setdefault(a.concept, []).append(a)
    held = {concept: _for_the_call(mentions) for concept, mentions in by_concept.items()}
    resolutions = {concept: (*([opposites[concept]] if concept in opposites else []), *resolves.get(concept, ()))
                   for concept in {*opposites, *resolves}}
    for resolver, targets in resolutions.items():
        said = [a for a in by_concept.get(resolver, ()) if a.status == PRESENT and a.statement and not a.derived]
        for target in targets:
            current = held.get(target)
            if current is not None and current.status in CURRENT and any(s.position > current.position for s in said):
                held[target] = _resolved(current)
    return held


def _for_the_call(mentions: list[Assertion]) -> Assertion:
    now = [a for a in mentions if a.status in NOW]
    if not now:
        return mentions[-1] if mentions[-1].status != QUESTION or all(a.status == QUESTION for a in mentions) \
            else [a for a in mentions if a.status != QUESTION][-1]
    there = [a for a in now if a.status in CURRENT]
    stopped = [a for a in now if a.status == RESOLVED]
    if there:
        latest = ([a for a in there if a.status == PRESENT] or there)[-1]
        if stopped and stopped[-1].position > there[-1].position:
            return stopped[-1]
        return latest
    return (stopped or now)[-1]


def _resolved(a: Assertion) -> Assertion:
    return Assertion(a.concept, RESOLVED, False, a.start, a.end, a.position, a.words, a.corrected, a.derived,
                     a.statement, a.categories)
