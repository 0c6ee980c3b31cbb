"""The dispatch app: calls, assessments and audit (models, services that write, selectors that read), the
intake API, the board, its sockets and Celery tasks. Runs in gunicorn (intake), daphne (web) and the Celery
workers; the project around it is ``config``. The migration app label is ``triage``."""
