"""The result sink's buffer: a call generated again from the start leaves nothing of its cancelled generation
to be published after the restart marker (which a flush publishes before its tokens)."""

from worker.sink import Pending


def test_a_restart_drops_the_cancelled_generations_buffered_tokens_replacement_and_done_only():
    pending = Pending(tokens=[(1, 7, "old"), (2, 0, "other")], done=[(1, "done"), (2, "done")],
                      replaced=[(1, "protocol text")])
    pending.restart(1)
    pending.tokens.append((1, 0, "new"))
    assert pending.tokens == [(2, 0, "other"), (1, 0, "new")]
    assert (pending.done, pending.replaced, pending.restarted) == ([(2, "done")], [], [1])
