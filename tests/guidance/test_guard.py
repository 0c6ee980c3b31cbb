"""The guard on the stream: protocol sentences pass however the tokens are cut, anything else is caught."""

from inference.guidance.guard import StreamGuard
from inference.guidance.plan import ASK, guidance_prompt, plan_guidance
from judgment.protocols import load_library


def _choking(esi=1, age=None):
    return plan_guidance(load_library(), "choking", "cardiorespiratory", esi, age)


def _stream(guard, text, piece=3):
    verdicts = []
    for start in range(0, len(text), piece):
        verdicts += guard.feed(text[start : start + piece])
    return verdicts + guard.finish()


def test_the_protocols_own_text_streamed_in_any_pieces_is_on_protocol():
    plan = _choking(age=0.5)
    guard = StreamGuard(plan.template)
    verdicts = _stream(guard, " " + plan.text)
    assert [v.sentence for v in verdicts] == list(plan.sentences)
    assert all(v.on_protocol for v in verdicts) and guard.off_protocol == 0


def test_a_sentence_that_is_not_in_the_protocol_is_caught():
    plan = _choking()
    guard = StreamGuard(plan.template)
    text = f"{plan.sentences[0]} Tell the call us back blows. {plan.sentences[1]}"
    verdicts = _stream(guard, text, piece=5)
    assert [v.on_protocol for v in verdicts] == [True, False, True]
    assert guard.off_protocol == 1


def test_a_protocol_sentence_cut_short_at_the_end_of_the_stream_is_caught():
    plan = _choking()
    guard = StreamGuard(plan.template)
    verdicts = _stream(guard, plan.sentences[0] + " " + plan.sentences[1][:20])
    assert [v.on_protocol for v in verdicts] == [True, False]


def test_the_patient_slot_accepts_any_of_its_fills_but_nothing_else():
    guard = StreamGuard(["Keep {patient} still."])
    assert guard.check("Keep the child still.") and guard.check("keep  the baby STILL.")
    assert not guard.check("Keep the dog still.")


def test_with_a_threshold_a_close_paraphrase_passes_and_a_far_one_does_not():
    def overlap(sentence, sentences):
        def words(text):
            return set(text.lower().strip(".").split())

        return max(len(words(sentence) & words(s)) / len(words(sentence) | words(s)) for s in sentences)

    guard = StreamGuard(["Keep the patient still and warm."], similarity=overlap, threshold=0.6)
    assert guard.check("Keep the patient warm and still.")
    assert not guard.check("Give the patient a hot drink.")


def test_an_unclear_selection_reads_the_familys_key_questions_and_the_prompt_carries_the_plan():
    library = load_library()
    plan = plan_guidance(library, "unclear", "cardiorespiratory", 2)
    assert plan.protocol == "unclear" and plan.sentences[1] == ASK
    assert plan.sentences[2:] == tuple(q.replace("{patient}", "the patient")
                                       for q in library.families["cardiorespiratory"].key_questions)
    prompt = guidance_prompt(plan, "He's CHOKING, can't talk")
    assert prompt.startswith("Protocol: unclear (cardiorespiratory), ESI 2\nInstructions: ")
    assert prompt.endswith("\nCall: hes choking, cant talk\nGuidance:")
    version = load_library().protocols["choking"].version
    assert f"Protocol: choking v{version}, ESI 1-2" in guidance_prompt(_choking(), "x")


def test_with_a_similarity_threshold_a_paraphrase_passes_and_another_emergencys_advice_does_not():
    """The lenient mode a deployment may set for a validated instruction model, with the real encoder."""
    from inference.guidance.similarity import sentence_similarity

    plan = _choking()
    guard = StreamGuard(plan.template, sentence_similarity(), threshold=0.8)
    paraphrase = "Give up to five sharp back blows between the shoulder blades."
    assert guard.check(paraphrase)
    assert not guard.check("Press hard on the wound with a clean cloth and do not lift it to look.")
    assert not StreamGuard(plan.template).check(paraphrase)  # strict: only the protocol's own sentences
