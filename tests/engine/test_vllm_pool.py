"""The vLLM pool's admission: a server is handed calls only as far as they can start there soon."""

from inference.backends.vllm_pool import VllmPool
from tools.stack import free_port


def handed_over(pool: VllmPool) -> list[str]:
    return [rid for rid, seq in pool.sequences.items() if seq.replica is not None]


def test_a_server_holds_at_most_max_unstarted_calls_awaiting_their_first_token_the_most_urgent_first():
    # Nothing listens on the port: the pool's own decision is observed before any stream could start.
    pool = VllmPool([f"http://127.0.0.1:{free_port()}"], model="guidance", capacity=32, max_unstarted=4)
    for i in range(10):
        pool.add_request(f"call{i}", "prompt", level=1 + i % 5, predicted_output_tokens=50)
    pool._submit_ready()
    assert sorted(handed_over(pool)) == ["call0", "call1", "call5", "call6"]  # the ESI-1 and ESI-2 calls

    pool.sequences["call0"].tokens = 1  # its first token came: one more call may go
    pool._submit_ready()
    assert len(handed_over(pool)) == 5 and "call2" in handed_over(pool)


def test_under_gorouting_the_pools_last_free_slot_waits_for_an_urgent_call():
    urls = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    pool = VllmPool(urls, model="guidance", capacity=2, max_unstarted=2, routing="gorouting")
    for i in range(4):
        pool.add_request(f"routine{i}", "prompt", level=4, predicted_output_tokens=50)
    pool._submit_ready()
    assert sorted(handed_over(pool)) == ["routine0", "routine1", "routine2"]  # the fourth slot is kept
    pool.add_request("urgent", "prompt", level=1, predicted_output_tokens=50)
    pool._submit_ready()
    assert "urgent" in handed_over(pool) and "routine3" not in handed_over(pool)

    soonest = VllmPool(urls, model="guidance", capacity=2, max_unstarted=2)
    for i in range(4):
        soonest.add_request(f"routine{i}", "prompt", level=4, predicted_output_tokens=50)
    soonest._submit_ready()
    assert len(handed_over(soonest)) == 4


def test_a_replicas_step_time_follows_the_gaps_between_its_tokens():
    from inference.backends.vllm_pool import _Event
    from inference.engine import StepResult

    url = f"http://127.0.0.1:{free_port()}"
    pool = VllmPool([url], model="guidance")
    pool.add_request("call", "prompt", level=3, predicted_output_tokens=50)
    pool._submit_ready()
    seq = pool.sequences["call"]
    before = pool.replicas[url].step_s
    for i in range(200):  # a token every 0.4 s, two at a time after the first
        pool._apply(_Event("text", "call", seq.submission, text="x", completion_tokens=1 + 2 * i, at=100.0 + 0.8 * i),
                    StepResult(stage=None))
    assert before == 0.1 and abs(pool.replicas[url].step_s - 0.4) < 0.01
