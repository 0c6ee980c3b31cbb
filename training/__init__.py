"""Building and scoring the models from our fixtures: ``manage.py build_models``, ``train_predictors``,
``evaluate_triage``, ``classify``, ``calibrate``. Run by a developer, CI or an image's build stage; nothing
here serves a call."""

import inference  # noqa: F401, E402 - Hugging Face offline and tokenizers single-threaded before any of them loads
