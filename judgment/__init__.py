"""Judging a call's urgency: the clinical knowledge a clinical lead edits (the catalogue of findings and the
dispatch protocol library, YAML under fixtures/, with sources), reading a call against it (``clinical``: spaCy
and medspaCy, the ESI algorithm's decision points A-D), and the trained heads that add the level, the
protocol and the answer's length (``predictors``). Run in the Celery triage worker (``triage.tasks``); plain
Python, no Django; torch is imported on the first load of a bundle. Training lives in ``training``."""
