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
