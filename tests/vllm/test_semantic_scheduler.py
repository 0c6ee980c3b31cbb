"""The semantic policy inside vLLM's scheduler: preempt on arrival, exact resumption, aging, the cap."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from conftest import SEMANTIC, make_engine, scheduler_of
from vllm import SamplingParams

from inference.backends.vllm_scheduler import pack_key
from scheduler.call_params import CallParams

PROMPT = "Call: my husband collapsed and is not breathing\nGuidance:"
LOW_TOKENS = 120


@dataclass
class Run:
    first_token_step: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    steps: int = 0


def params(level: int, tokens: int, **values: float) -> SamplingParams:
    """What the pool sends: the call's values as ``vllm_xargs`` (``CallParams``, accepted now by default)."""
    call = CallParams(level=level, predicted_tokens=tokens, **{"accepted_at": time.time(), **values})
    return SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, extra_args=call.to_extra_args())


def level_of(sampling: SamplingParams) -> int:
    return CallParams.from_extra_args(sampling.extra_args, priority=None, now=0.0).level


def run(engine, arrivals: dict[int, list[tuple[str, str, SamplingParams]]]) -> Run:  # noqa: ANN001
    """Add each (id, prompt, params) at its step, step until done; first-token step and text per request."""
    result = Run()
    while engine.has_unfinished_requests() or any(step >= result.steps for step in arrivals):
        for request_id, prompt, sampling in arrivals.get(result.steps, []):
            engine.add_request(request_id, prompt, sampling, priority=level_of(sampling))
        outputs = engine.step()
        result.steps += 1
        for o in outputs:
            if o.outputs and o.outputs[0].token_ids and o.request_id not in result.first_token_step:
                result.first_token_step[o.request_id] = result.steps
            if o.finished:
                result.texts[o.request_id] = o.outputs[0].text
        if result.steps > 2000:
            raise AssertionError("the engine did not finish")
    return result


def full_batch_then_urgent(tag: str, urgent_xargs: dict | None = None,
                           **low_xargs: float) -> dict[int, list[tuple[str, str, SamplingParams]]]:
    lows = [(f"{tag}-low{i}", f"{PROMPT} caller {i}", params(5, LOW_TOKENS, **low_xargs)) for i in range(4)]
    return {0: lows, 5: [(f"{tag}-urgent", PROMPT, params(1, 30, **(urgent_xargs or {})))]}


def test_an_esi1_request_preempts_a_full_batch_of_esi5_and_gets_its_first_token_at_once(semantic_engine,
                                                                                     stock_engine):
    stock = run(stock_engine, full_batch_then_urgent("stock"))
    before = scheduler_of(semantic_engine).arrival_preemptions
    ours = run(semantic_engine, full_batch_then_urgent("ours"))
    assert ours.first_token_step["ours-urgent"] - 5 <= 2
    assert stock.first_token_step["stock-urgent"] - 5 > 50  # vLLM's own policy waits for a free slot
    assert scheduler_of(semantic_engine).arrival_preemptions - before == 1
    assert ours.steps == stock.steps  # no work lost or added beyond the victim's recompute


def test_every_preempted_request_completes_with_the_text_it_produces_alone(semantic_engine, mode):
    scheduler = scheduler_of(semantic_engine)
    in_flight_at_preemption = []
    preempt = scheduler._preempt_request

    def observed(request, timestamp, **kwargs):  # noqa: ANN001, ANN202 - vLLM's own method, observed
        in_flight_at_preemption.append(request.num_output_placeholders)
        return preempt(request, timestamp, **kwargs)

    scheduler._preempt_request = observed
    try:
        crowded = run(semantic_engine, full_batch_then_urgent("crowd"))
    finally:
        del scheduler._preempt_request
    # under async scheduling the victim's next step was already scheduled: its output arrives stale
    assert in_flight_at_preemption and (max(in_flight_at_preemption) > 0) == (mode == "async")
    for i in range(4):
        alone = run(semantic_engine, {0: [(f"alone{i}", f"{PROMPT} caller {i}", params(5, LOW_TOKENS))]})
        assert crowded.texts[f"crowd-low{i}"] == alone.texts[f"alone{i}"]
    assert len(crowded.texts["crowd-urgent"]) > 0


def test_a_request_at_its_preemption_cap_keeps_its_slot(semantic_engine):
    capped = run(semantic_engine, full_batch_then_urgent("capped", max_preemptions=0))
    assert capped.first_token_step["capped-urgent"] - 5 > 50


def test_with_preempt_on_arrival_off_an_urgent_request_waits_for_a_free_slot(semantic_engine):
    waits = run(semantic_engine, full_batch_then_urgent("off", urgent_xargs={"preempt_on_arrival": False}))
    assert waits.first_token_step["off-urgent"] - 5 > 50


def test_limited_preemption_protects_running_requests_past_c_times_their_predicted_length(semantic_engine):
    # each ESI-5 request has generated more than 0.01 x its 120 predicted tokens by step 5
    limited = run(semantic_engine, full_batch_then_urgent("limited", limited_c=0.01))
    assert limited.first_token_step["limited-urgent"] - 5 > 50


def test_an_aged_request_overtakes_a_fresher_more_urgent_one_only_once_its_steps_have_passed(tiny_model, mode):
    engine = make_engine(tiny_model, SEMANTIC[mode], max_num_seqs=1, mode=mode)
    now = time.time()
    arrivals = {
        0: [("running-esi3", PROMPT, params(3, 40))],
        1: [("fresh-esi3", PROMPT, params(3, 10)),
            # accepted 10 s ago, one level per second down to ESI 2: it runs as ESI 2, before the fresh ESI 3,
            # and displaces the running ESI 3
            ("aged-esi5", PROMPT, params(5, 10, accepted_at=now - 10.0, aging_step_s=1.0,
                                         aging_ceiling=2)),
            ("young-esi5", PROMPT, params(5, 10, accepted_at=now, aging_step_s=3600.0))],
    }
    result = run(engine, arrivals)
    order = sorted(result.first_token_step, key=result.first_token_step.get)
    assert order == ["running-esi3", "aged-esi5", "fresh-esi3", "young-esi5"]
    assert result.first_token_step["aged-esi5"] <= 3


@pytest.mark.parametrize("better, worse", [
    ((1, 1, 500), (2, 0, 0)),           # a more urgent level first, whatever follows
    ((2, 0, 1_800_000_000_000), (2, 1, 1)),  # overdue before not overdue within a level
    ((3, 1, 10), (3, 1, 11)),           # shorter predicted remaining first
])
def test_the_packed_priority_sorts_as_the_semantic_key(better, worse):
    assert pack_key(better) < pack_key(worse)


def test_the_synchronous_plugin_refuses_an_engine_with_async_scheduling(tiny_model):
    with pytest.raises(Exception, match="SemanticAsyncVllmScheduler"):
        make_engine(tiny_model, SEMANTIC["sync"], mode="async")


def test_the_asynchronous_plugin_also_serves_an_engine_without_it(tiny_model):
    """An operator who names the async class on a CPU server (where vLLM turns async scheduling off) is served."""
    engine = make_engine(tiny_model, SEMANTIC["async"], mode="sync")
    result = run(engine, full_batch_then_urgent("cpu-async"))
    assert result.first_token_step["cpu-async-urgent"] - 5 <= 2


def test_each_preemption_is_published_naming_the_submission_for_the_pool(tiny_model, mode, monkeypatch):
    """The plug-in's notice (scheduler/preemption_notice.py) on its PUB socket: the victim's ``ref``, its count."""
    import zmq

    from scheduler.preemption_notice import PreemptionNotice
    from tools.stack import free_port

    port = free_port()
    monkeypatch.setenv("TRIAGE_VLLM_EVENTS", f"tcp://127.0.0.1:{port}")
    engine = make_engine(tiny_model, SEMANTIC[mode], mode=mode)
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(f"tcp://127.0.0.1:{port}")
    time.sleep(0.3)  # PUB drops what it sends before a subscriber has joined
    lows = [(f"low{i}", f"{PROMPT} caller {i}", params(5, LOW_TOKENS, ref=f"call-{i}#1")) for i in range(4)]
    run(engine, {0: lows, 5: [("urgent", PROMPT, params(1, 30, ref="call-9#1"))]})
    notices = []
    while subscriber.poll(500):
        notices.append(PreemptionNotice.from_bytes(subscriber.recv()))
    subscriber.close()
    assert len(notices) == scheduler_of(engine).arrival_preemptions == 1
    [notice] = notices
    assert notice.ref in {f"call-{i}#1" for i in range(4)} and notice.preemptions == 1
    assert notice.computed_tokens > 0
