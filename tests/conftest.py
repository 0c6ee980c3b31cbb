"""Suite-wide configuration. Each area's fixtures live in its own plugin module under tests/fixtures/."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = [
    p
    for p in (
        "tests.fixtures.services",
        "tests.fixtures.predictors",
        "tests.fixtures.llm",
        "tests.fixtures.browser",
        "tests.fixtures.vllm_servers",
    )
    if os.path.exists(os.path.join(os.path.dirname(__file__), "fixtures", p.rsplit(".", 1)[1] + ".py"))
]

# tests/vllm runs inside the vLLM server's environment (`make test-vllm`), not this one.
collect_ignore = ["vllm"]
