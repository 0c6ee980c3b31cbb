"""What the inference worker keeps per live call: the guard flags the first off-protocol sentence once, counts
them all, and a cancellation asked for by a protocol switch means "admit again", not "finished"."""

from inference.guidance.follow import GuidanceFollower
from inference.guidance.plan import plan_guidance
from judgment.protocols import load_library


def _plan():
    return plan_guidance(load_library(), "choking", "cardiorespiratory", 1, None)


def _feed(follower, rid, text, piece=4):
    return [r for start in range(0, len(text), piece) if (r := follower.on_token(rid, text[start : start + piece]))]


def test_a_call_that_reads_its_protocol_out_is_never_flagged():
    follower, plan = GuidanceFollower(), _plan()
    follower.admitted("7", plan, 0)
    assert _feed(follower, "7", " " + plan.text) == []
    followed, replacement = follower.on_done("7")
    assert (followed.plan, followed.generation, followed.off_protocol, replacement) == (plan, 0, 0, None)


def test_the_first_off_protocol_sentence_brings_the_protocols_own_text_once_and_every_one_is_counted():
    follower, plan = GuidanceFollower(), _plan()
    follower.admitted("7", plan, 2)
    text = f" {plan.sentences[0]} Give him some whisky. {plan.sentences[1]} Shake him hard. Then wait"
    assert _feed(follower, "7", text) == [plan.text]
    followed, replacement = follower.on_done("7")
    assert (followed.off_protocol, followed.generation, replacement) == (3, 2, None)  # "Then wait" is cut short
    assert follower.off_protocol_total == 3


def test_an_off_protocol_last_sentence_is_caught_when_the_call_finishes():
    follower, plan = GuidanceFollower(), _plan()
    follower.admitted("7", plan, 0)
    assert _feed(follower, "7", f" {plan.sentences[0]} Do nothing at all") == []
    followed, replacement = follower.on_done("7")
    assert followed.off_protocol == 1 and replacement == plan.text


def test_a_call_without_a_plan_is_not_guarded():
    follower = GuidanceFollower()
    follower.admitted("7", None, 0)
    assert _feed(follower, "7", "Anything at all. Really.") == []
    assert follower.on_done("7")[0].off_protocol == 0


def test_a_cancellation_for_a_protocol_switch_means_admit_again_and_a_plain_one_does_not():
    follower, plan = GuidanceFollower(), _plan()
    follower.admitted("7", plan, 0)
    follower.admitted("8", plan, 0)
    follower.regenerate("7")
    assert follower.on_cancelled("7") is True
    assert follower.on_cancelled("8") is False
    assert follower.on_cancelled("7") is False  # asked once, answered once


def test_under_strict_matching_the_output_is_held_to_the_plan_and_with_a_threshold_it_is_not():
    follower, plan = GuidanceFollower(), _plan()
    assert follower.read_out(plan) == plan.sentences and follower.read_out(None) is None
    follower.use_similarity(lambda sentence, sentences: 1.0, 0.8)
    assert follower.read_out(plan) is None  # a validated model may reword; the guard holds it
    follower.use_similarity(None, None)
    assert follower.read_out(plan) == plan.sentences
