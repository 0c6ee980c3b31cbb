"""The LLM side: our engine (``engine``, ``model_runner``, ``kv_store``), the vLLM plug-in and pool
(``backends``), the guidance a model drafts from a protocol (``guidance``), TRAIL's length probe and the cost
model's calibration. Run by the inference worker (``worker``) and, for the plug-in, inside vLLM; no Django.

Nothing is downloaded at run time: Hugging Face libraries are told to stay offline before any of them is
imported (a model path that is not on disk fails loudly instead of reaching a hub), and tokenizers keep no
thread pool that a forked Celery process would inherit.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
