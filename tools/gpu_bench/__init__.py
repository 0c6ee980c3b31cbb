"""The embedded inference worker measured on a GPU, in one command that needs only torch, transformers and our
``inference`` and ``scheduler`` packages (no Django, Redis or PostgreSQL):

    python -m tools.gpu_bench --device cuda --out DIR          # on a GPU: ~1B-parameter model, bf16
    python -m tools.gpu_bench --device cpu --tiny --out DIR    # the same sections in seconds (CI)

Sections (each writes its part of DIR/gpu_bench.json; DIR/gpu_bench.txt is the short table):

- ``throughput``: our engine against sequential ``generate()`` at 1 / 8 / 32 / 64 concurrent calls;
- ``burst``: the calls of ``fixtures/gpu_bench/burst.jsonl`` (their predicted levels and answer lengths, made on
  a CPU by ``python -m tools.gpu_bench.prepare``), FCFS against semantic, with a KV budget small enough
  that memory binds;
- ``costs``: the cost model calibrated on the device (``inference.calibration``), and a swap-out overlapped
  with compute on the default stream against on a copy stream of its own;
- ``exactness``: a preempted and resumed request's greedy output against its solo run, for swap, recompute and
  partial keep, in the model's dtype and in float32.

The model has the Llama architecture and random weights (``model.build``): its cost is realistic, its words are
not, so every answer runs to its call's predicted length (random weights never emit EOS).
"""
