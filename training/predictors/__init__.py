"""Training the triage predictors (``judgment.predictors``) from the call corpus, scoring them on the
evaluation sets and writing the bundle with its model card: ``manage.py train_predictors``,
``manage.py evaluate_triage``."""
