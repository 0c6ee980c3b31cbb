"""Reading a call with spaCy and medspaCy: the pipeline that turns a transcript into concept mentions, each with
the ConText modifiers that reach it.

    tokenizer            spaCy's English tokenizer ("can't" -> can + not, "hes" -> he + s)
    triage_normaliser    token NORMs: spellings callers use (fixtures/clinical/reading.yaml), apostrophe-less
                         contractions, number words as digits, non-words corrected (``spelling``)
    sentencizer          sentence boundaries at . ! ? ; and line ends (spaCy's rule-based splitter)
    triage_turns         every speaker turn ("Caller:", "CT:") and line opens a sentence
    medspacy_target_matcher  the catalogue's phrases (``phrases``) on NORMs, every match kept
    triage_outermost     a mention inside a longer mention of another concept is dropped
    medspacy_context     ConText: medspaCy's default rules (less those context.yaml excludes) and context.yaml's

ConText's scope stops at a sentence end, at a terminator ("but", "and his"), at a clause break (comma, semicolon,
colon) and at a rule's word window; a cue that is part of a mention ("not breathing") governs nothing. One
reader per catalogue content (``reader_for``); reading a call is O(length + mentions * cues).
"""

import itertools
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import spacy
from medspacy.context import ConTextRule
from medspacy.target_matcher import TargetRule
from spacy.language import Language
from spacy.tokens import Doc, Span, Token

from .numbers import number_spans
from .phrases import NUMBER_LEMMA, compile_phrase, resolve_stems, stems
from .spelling import SpellingCorrector

SPAN_GROUP = "concepts"
# spaCy's rule-based sentencizer, not medspaCy's PyRuSH: on the development sets both split the same findings,
# and PyRuSH costs 7 ms a call and logs each rule it skips at INFO on the root logger (docs/decisions/
# clinical-text-with-medspacy.md).
SENTENCE_ENDS = (".", "!", "?", ";", "\n")
SCREEN_PIPES = ("triage_normaliser", "medspacy_target_matcher")  # concepts without sentences or ConText
CLAUSE_BREAKS = frozenset({",", ";", ":"})
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
DEFAULT_WINDOW = 6  # words a cue reaches when its rule names no window
# A contraction typed without its apostrophe ("hes", "im") reaches us as two tokens; the second one's NORM.
APOSTROPHE_LESS = {"s": "'s", "m": "am", "re": "are", "ll": "will", "d": "would", "ve": "have", "nt": "not"}
# ConText categories: ours (context.yaml) to medspaCy's names; RESOLVED is ours alone.
CATEGORY_NAMES = {
    "negated": "NEGATED_EXISTENCE", "possible": "POSSIBLE_EXISTENCE", "historical": "HISTORICAL",
    "hypothetical": "HYPOTHETICAL", "other_person": "FAMILY", "resolved": "RESOLVED",
    "resolved_previous": "RESOLVED_PREVIOUS",  # read by ``assertion.resolve_told_of_it``, not as an edge
}
DIRECTION_NAMES = {"forward": "FORWARD", "backward": "BACKWARD", "both": "BIDIRECTIONAL"}

for _name, _default in (("view", None), ("corrected", False)):
    if not Token.has_extension(_name):
        Token.set_extension(_name, default=_default)


@dataclass(frozen=True)
class CueSpec:
    """A ConText cue from context.yaml: a phrase, its category and direction, the words it reaches."""

    phrase: str
    category: str  # negated | possible | historical | hypothetical | other_person | resolved
    direction: str  # forward | backward | both
    uncertain: bool = False  # "I don't think": a denial the caller is unsure of
    window: int = DEFAULT_WINDOW
    with_negation: bool = False  # counts only beside a denial ("never fainted before": no history of fainting)
    across_clauses: bool = False  # reaches past commas: an instruction about a whole sentence ("if X, or Y, call back")
    when_caller_is_patient: bool = False  # holds only when the caller is the patient ("my dad had one at 50")


@dataclass(frozen=True)
class ReadingRules:
    """What the reader needs from the catalogue, as plain data (hashable parts only)."""

    concepts: tuple[tuple[str, tuple[str, ...]], ...]  # concept id -> its phrases
    cues: tuple[CueSpec, ...]
    terminators: tuple[str, ...]
    pseudo: tuple[str, ...]
    spellings: tuple[tuple[str, str], ...]
    speaker_tags: tuple[str, ...]
    excluded_default_cues: tuple[str, ...] = ()  # medspaCy default rules (by literal) that misread calls


@lru_cache(maxsize=1)
def _tokenizer() -> Callable[[str], Doc]:
    return spacy.blank("en").tokenizer


@lru_cache(maxsize=8192)
def _cached_norms(word: str) -> tuple[str, ...]:
    return tuple(t.norm_ for t in _tokenizer()(word))


def word_norms(word: str) -> list[str]:
    """The NORMs of the tokens spaCy's English tokenizer cuts ``word`` into ("can't" -> ["can", "not"]): how a
    catalogue phrase's words are compared with a call's tokens."""
    return list(_cached_norms(word))


@Language.factory("triage_normaliser", default_config={"spellings": {}, "vocabulary": [], "stems": []})
def make_normaliser(nlp: Language, name: str, spellings: dict[str, str], vocabulary: list[str],
                    stems: list[str]) -> "Normaliser":
    return Normaliser(nlp, spellings, vocabulary, stems)


class Normaliser:
    """Sets each token's NORM to the spelling the catalogue's phrases use, and ``token._.view`` where the normalised
    text (``normalised_text``) shows something else than the lower-cased token. Splits a word the spellings table
    reads as several ("dunno" -> do not know) and merges number words ("a hundred and ten" -> 110)."""

    def __init__(self, nlp: Language, spellings: Mapping[str, str], vocabulary: Iterable[str],
                 stems: Iterable[str]) -> None:
        self.spellings = {word.lower(): (replacement, word_norms(replacement))
                          for word, replacement in spellings.items()}
        self.corrector = SpellingCorrector(vocabulary, keep=self.spellings)
        self.stems = frozenset(stems)
        self.longest_stem = max(map(len, self.stems), default=0)

    def __call__(self, doc: Doc) -> Doc:
        views: dict[int, str] = {}  # character offset of a token -> its view in the normalised text
        with doc.retokenize() as retokenizer:
            for token in doc:
                entry = self.spellings.get(token.lower_)
                if entry is not None and 1 < len(entry[1]) <= len(token.text):
                    pieces = len(entry[1])
                    orths = [*token.text[: pieces - 1], token.text[pieces - 1:]]
                    retokenizer.split(token, orths, heads=[(token, i) for i in range(pieces)],
                                      attrs={"NORM": entry[1]})
                    views.update({token.idx + i: (entry[0] if i == 0 else "") for i in range(pieces)})
        numbers = {}
        with doc.retokenize() as retokenizer:
            for start, end, value in number_spans([t.lower_ for t in doc]):
                if end - start > 1:
                    retokenizer.merge(doc[start:end])
                numbers[doc[start].idx] = str(value)
        for token in doc:
            entry = self.spellings.get(token.lower_)
            if token.idx in views:
                token._.view = views[token.idx]
            elif token.idx in numbers:
                token.norm_ = token._.view = numbers[token.idx]
            elif entry is not None and len(entry[1]) == 1:
                token.norm_ = entry[1][0]
                token._.view = entry[0]
            elif (token.i and token.lower_ in APOSTROPHE_LESS and not doc[token.i - 1].whitespace_
                  and doc[token.i - 1].is_alpha):
                token.norm_ = APOSTROPHE_LESS[token.lower_]
            elif token.is_alpha and token.norm_ == token.lower_:
                corrected = self.corrector.correct(token.lower_)
                if corrected is not None:
                    token.norm_ = token._.view = corrected
                    token._.corrected = True
            token.lemma_ = self._stem(token.norm_)
        return doc

    def _stem(self, norm: str) -> str:
        """The LEMMA the matcher's wildcard and number tests read: the longest catalogue stem ``norm`` starts
        with, ``NUMBER_LEMMA`` for a number, else the NORM itself (never a stem: it would have been found)."""
        if _NUMBER.match(norm):
            return NUMBER_LEMMA
        for length in range(min(len(norm), self.longest_stem), 0, -1):
            if norm[:length] in self.stems:
                return norm[:length]
        return norm


@Language.factory("triage_turns", default_config={"tags": []})
def make_turns(nlp: Language, name: str, tags: list[str]) -> "SpeakerTurns":
    return SpeakerTurns(nlp, tags)


class SpeakerTurns:
    """A speaker tag followed by a colon ("Caller:", "Call taker:", "911:") or a line break opens a sentence, so
    that no cue or phrase runs from the call-taker's words into the caller's."""

    def __init__(self, nlp: Language, tags: Iterable[str]) -> None:
        self.tags = {tuple(t.norm_ for t in nlp.tokenizer(tag)) for tag in tags}
        self.longest = max((len(t) for t in self.tags), default=0)

    def __call__(self, doc: Doc) -> Doc:
        for token in doc:
            if token.text == ":":
                for n in range(1, min(self.longest, token.i) + 1):
                    if tuple(t.norm_ for t in doc[token.i - n:token.i]) in self.tags:
                        doc[token.i - n].is_sent_start = True
                        if token.i + 1 < len(doc):
                            doc[token.i + 1].is_sent_start = True
                        break
            elif "\n" in token.text and token.i + 1 < len(doc):
                doc[token.i + 1].is_sent_start = True
        return doc


@Language.component("triage_outermost")
def outermost(doc: Doc) -> Doc:
    """Drop each mention inside a longer mention of its own concept (the matcher reports every length a gap
    allows), or of another concept when the longer one's words are all its phrase's ("not breathing properly"
    is not "not breathing"). A phrase with a gap names a finding by its two ends; what the gap takes in is read
    too ("his lips ... grey" holds "clammy and grey"). O(m log m) for m mentions."""
    spans = sorted(doc.spans.get(SPAN_GROUP, []), key=lambda s: (s.start, -(s.end - s.start)))
    kept: list[Span] = []
    for span in spans:
        if not any(k.start <= span.start and span.end <= k.end and (
                k.label_ == span.label_ or ((k.end - k.start) > (span.end - span.start) and not _has_gap(k)))
                for k in kept):
            kept.append(span)
    # Two mentions that share words without one holding the other: the phrase without a gap keeps them ("his
    # blue inhaler" is asthma's "blue inhaler", not "he ... blue")
    loose = {id(a) for a in kept for b in kept if a is not b and a.label_ != b.label_ and _has_gap(a)
             and not _has_gap(b) and a.start < b.end and b.start < a.end
             and not (a.start <= b.start and b.end <= a.end)}
    doc.spans[SPAN_GROUP] = [s for s in kept if id(s) not in loose]
    return doc


def _has_gap(span: Span) -> bool:
    rule = span._.target_rule
    return rule is not None and rule.pattern is not None and any(t.get("OP") for t in rule.pattern)


MAX_LITERALS = 64


def _literals(pattern: list[dict]) -> list[str] | None:
    """The word sequences a pattern of exact and set tests on NORM stands for, as texts for spaCy's
    PhraseMatcher (a hash lookup per token, whatever the number of phrases); None for a pattern with a gap or a
    stem test, or one that stands for more than ``MAX_LITERALS`` sequences, which the Matcher runs."""
    choices = []
    for token in pattern:
        if set(token) != {"NORM"}:
            return None
        value = token["NORM"]
        choices.append(value["IN"] if isinstance(value, dict) else [value])
    count = 1
    for choice in choices:
        count *= len(choice)
    if count > MAX_LITERALS:
        return None
    sequences = list(itertools.product(*choices))
    texts = [" ".join(words) for words in sequences]
    if any(tuple(word_norms(t)) != words for t, words in zip(texts, sequences, strict=True)):
        return None  # a sequence the tokenizer would cut differently: keep the token pattern
    return texts


def _first_token_exact(pattern: list[dict]) -> list[list[dict]]:
    """One pattern per value of a set test on the first token. spaCy's matcher tries every pattern's first token
    at every token of a call: an exact test is a hash compare in C, a set test a Python call (a pattern that
    opens with a set test cost about 20 ms a call over the catalogue's 3,400 patterns)."""
    first = pattern[0]
    if len(first) != 1:
        return [pattern]
    (attribute, value), = first.items()
    if not isinstance(value, dict) or "IN" not in value:
        return [pattern]
    return [[{attribute: v}, *pattern[1:]] for v in value["IN"]]


def _reaches(window: int, across_clauses: bool = False) -> Callable[[Span, Span, Span], bool]:
    """ConText's ``on_modifies`` callback for a rule: the cue reaches a target at most ``window`` words away,
    never across a comma, semicolon or colon unless the rule says it governs the whole sentence."""
    def reaches(target: Span, modifier: Span, between: Span) -> bool:
        words = [t for t in between if not (modifier.start <= t.i < modifier.end)]
        return len(words) <= window and (across_clauses or not any(t.text in CLAUSE_BREAKS for t in words))
    return reaches


class CallReader:
    """The pipeline for one catalogue's rules. ``read`` returns the spaCy Doc; ``mentions`` its concept spans."""

    def __init__(self, rules: ReadingRules) -> None:
        nlp = spacy.blank("en")
        vocabulary = sorted({w for _, phrases in rules.concepts for p in phrases for w in _literal_words(p)}
                            | {w for cue in rules.cues for w in _literal_words(cue.phrase)})
        concept_patterns = [(concept, phrase, resolve_stems(p, set()))
                            for concept, phrases in rules.concepts for phrase in phrases
                            for p in compile_phrase(phrase, word_norms)]
        cue_rules = self._context_rules(rules)
        all_stems = stems([p for _, _, p in concept_patterns] + [r.pattern for r in cue_rules])
        nlp.add_pipe("triage_normaliser", config={
            "spellings": dict(rules.spellings), "vocabulary": vocabulary, "stems": sorted(all_stems)})
        nlp.add_pipe("sentencizer", config={"punct_chars": list(SENTENCE_ENDS)})
        nlp.add_pipe("triage_turns", config={"tags": list(rules.speaker_tags)})
        targets = nlp.add_pipe("medspacy_target_matcher", config={
            "result_type": "group", "span_group_name": SPAN_GROUP, "prune": False, "phrase_matcher_attr": "NORM"})
        target_rules = []
        for concept, phrase, pattern in concept_patterns:
            pattern = resolve_stems(pattern, all_stems)
            literals = _literals(pattern)
            if literals is not None:
                target_rules += [TargetRule(literal, concept) for literal in literals]
            else:
                target_rules += [TargetRule(phrase, concept, pattern=p) for p in _first_token_exact(pattern)]
        targets.add(target_rules)
        nlp.add_pipe("triage_outermost")
        context = nlp.add_pipe("medspacy_context", config={
            "input_span_type": "group", "span_group_name": SPAN_GROUP, "span_attrs": None, "rules": None,
            "prune_on_target_overlap": True, "phrase_matcher_attr": "NORM"})
        excluded = set(rules.excluded_default_cues)
        context.add([r for r in ConTextRule.from_json(context.DEFAULT_RULES_FILEPATH) if r.literal not in excluded])
        context.add([ConTextRule(rule.literal, rule.category, pattern=exploded, direction=rule.direction,
                                 max_scope=rule.max_scope, metadata=rule.metadata)
                     for rule in cue_rules for exploded in _first_token_exact(resolve_stems(rule.pattern, all_stems))])
        for rule in context.rules:  # medspaCy's defaults too: our window and clause breaks
            rule.on_modifies = _reaches(rule.max_scope or DEFAULT_WINDOW,
                                        bool((rule.metadata or {}).get("across_clauses")))
            # The window is kept by ``_reaches``, not by max_scope: medspaCy tests scope overlap with a check
            # that misses one scope inside another, so a terminator (scoped to the sentence) never ends a
            # scope that max_scope has cut short of the sentence's end (medspacy/util.py: tuple_overlaps).
            rule.max_scope = None
        self.nlp = nlp
        self.vocabulary = tuple(vocabulary)

    def _context_rules(self, rules: ReadingRules) -> list[ConTextRule]:
        out = []
        for cue in rules.cues:
            for pattern in compile_phrase(cue.phrase, word_norms):
                out.append(ConTextRule(cue.phrase, CATEGORY_NAMES[cue.category], pattern=pattern,
                                       direction=DIRECTION_NAMES[cue.direction], max_scope=cue.window,
                                       metadata={"uncertain": cue.uncertain, "with_negation": cue.with_negation,
                                                 "across_clauses": cue.across_clauses,
                                                 "when_caller_is_patient": cue.when_caller_is_patient}))
        for phrase in rules.terminators:
            out += [ConTextRule(phrase, "TERMINATE", pattern=p, direction="TERMINATE")
                    for p in compile_phrase(phrase, word_norms)]
        for phrase in rules.pseudo:
            out += [ConTextRule(phrase, "PSEUDO", pattern=p, direction="PSEUDO")
                    for p in compile_phrase(phrase, word_norms)]
        return out

    def read(self, transcript: str, pipes: Sequence[str] | None = None) -> Doc:
        """The read call; ``pipes``: only these components (``SCREEN_PIPES`` for a pre-screen)."""
        if pipes is None:
            return self.nlp(_same_length_cleanup(transcript))
        with self.nlp.select_pipes(enable=list(pipes)):
            return self.nlp(_same_length_cleanup(transcript))

    def read_many(self, transcripts: Sequence[str]) -> list[Doc]:
        return list(self.nlp.pipe(_same_length_cleanup(t) for t in transcripts))


_readers: dict[str, CallReader] = {}
_readers_lock = threading.Lock()


class ReadableCatalogue(Protocol):
    """What the reader needs of a catalogue (``records.Catalogue``)."""

    digest: str
    reading: ReadingRules


def reader_for(catalogue: ReadableCatalogue) -> CallReader:
    """The pipeline for this catalogue's content, built once per process (about three seconds)."""
    with _readers_lock:
        if catalogue.digest not in _readers:
            _readers[catalogue.digest] = CallReader(catalogue.reading)
        return _readers[catalogue.digest]


def mentions(doc: Doc) -> list[Span]:
    """The concept mentions of a read call, in text order."""
    return sorted(doc.spans.get(SPAN_GROUP, []), key=lambda s: (s.start, s.end))


def normalised_text(doc: Doc) -> str:
    """The call as the number and vital-sign readers see it: lower case, the normaliser's spellings and digits."""
    return "".join((t._.view if t._.view is not None else t.lower_) + t.whitespace_ for t in doc).strip()


def _same_length_cleanup(text: str) -> str:
    """Typographic apostrophes to ', a hyphen between letters to a space ("call-taker", "x-ray"): the text keeps
    its length, so every span's characters are the transcript's."""
    chars = list(text.replace("\u2019", "'").replace("\u2018", "'").replace("`", "'"))
    for i in range(1, len(chars) - 1):
        if chars[i] == "-" and chars[i - 1].isalpha() and chars[i + 1].isalpha():
            chars[i] = " "
    return "".join(chars)


def _literal_words(phrase: str) -> list[str]:
    from .phrases import phrase_words

    return phrase_words(phrase)
