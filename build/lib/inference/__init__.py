"""The engines, the predictors and the guidance plan: no Django here.

Nothing is downloaded at run time: Hugging Face libraries are told to stay offline before any of them is
imported (a model path that is not on disk fails loudly instead of reaching a hub), and tokenizers keep no
thread pool that a forked Celery process would inherit.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
