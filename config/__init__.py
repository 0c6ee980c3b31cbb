"""The Django project: settings, URLs, the ASGI/WSGI and Celery entry points, the middleware every process
serves through (probes, metrics, static files) and its logging. Loaded by every Django process (gunicorn
intake, daphne web, the Celery workers and beat, the inference worker, manage.py); the apps it assembles are
``triage`` (the dispatch app), ``worker`` (the inference worker), ``training`` and ``tools``.

The Celery app is created on import, as Celery's Django guide has it, so that ``shared_task`` and
``celery.current_app`` in the apps find it in whichever process loaded these settings.
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
