"""Constrained read-out: only the plan's own sentences, each whole and at most once, then EOS."""

from inference.guidance.read_out import ReadOutConstraint

EOS = 0


def _walk(constraint: ReadOutConstraint, choose) -> list[int]:
    """Generate by ``choose(allowed)`` until EOS; returns the tokens."""
    out = []
    for _ in range(100):
        token = choose(constraint.allowed())
        out.append(token)
        constraint.advance(token)
        if token == EOS:
            return out
    raise AssertionError("no EOS in 100 tokens")


def test_a_sentence_once_started_must_be_finished_before_anything_else():
    c = ReadOutConstraint([[1, 2, 3], [4, 5]], EOS)
    assert c.allowed() == [1, 4]  # no EOS before a sentence is read
    c.advance(1)
    assert c.allowed() == [2]
    c.advance(2)
    assert c.allowed() == [3]
    c.advance(3)
    assert c.allowed() == [EOS, 4]  # the sentence is read: the other one, or the end


def test_each_sentence_is_read_at_most_once_then_only_eos_is_left():
    c = ReadOutConstraint([[1, 2], [3]], EOS)
    assert _walk(c, max) == [3, 1, 2, EOS]
    assert c.allowed() == [EOS]


def test_sentences_sharing_their_start_are_both_reachable():
    c = ReadOutConstraint([[1, 2, 3], [1, 2, 4]], EOS)
    c.advance(1)
    c.advance(2)
    assert c.allowed() == [3, 4]
    c.advance(4)
    assert c.allowed() == [EOS, 1]
    c.advance(1)
    c.advance(2)
    assert c.allowed() == [3]  # the one with 4 was read


def test_a_sentence_that_continues_into_a_longer_one_may_end_or_go_on():
    c = ReadOutConstraint([[1, 2], [1, 2, 3]], EOS)
    c.advance(1)
    c.advance(2)
    assert c.allowed() == [EOS, 1, 3]


def test_whatever_the_model_prefers_the_output_is_a_sequence_of_whole_sentences():
    sentences = [[7, 8, 9], [7, 10], [11]]
    for prefer in (max, min, lambda a: a[len(a) // 2]):
        out = _walk(ReadOutConstraint(sentences, EOS), prefer)[:-1]
        pieces, i = [], 0
        while i < len(out):
            match = next(s for s in sorted(sentences, key=len, reverse=True) if out[i : i + len(s)] == s)
            pieces.append(match)
            i += len(match)
        assert len(pieces) == len({tuple(p) for p in pieces})  # none twice
