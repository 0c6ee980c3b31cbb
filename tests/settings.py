"""The suite's settings: production's (config/settings.py), with what a test run needs said here, explicitly.

pyproject.toml names this module for pytest-django, which exports it in DJANGO_SETTINGS_MODULE, so every
process the tests start (daphne, Celery, the inference worker, manage.py) runs on these settings too.
"""

import os

# Production refuses to start without a key; the suite's own is set before the settings read it.
os.environ.setdefault("DJANGO_SECRET_KEY", "test-suite-only-" + "k" * 50)

from config.settings import *  # noqa: E402, F403

# The test client, the browser tests and the servers they start speak plain http on 127.0.0.1: no
# redirect to https, and cookies a browser sends back over http.
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = False

# The suite renders the board without collecting static files; the hashed (manifest) names production uses
# are tested on a collected tree (tests/dashboard/test_static_files.py).
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"}}  # noqa: F405

# The suite's webhook receivers listen on 127.0.0.1, and a retry waits a fraction of a second, not 10 s.
TRIAGE = {**TRIAGE, "WEBHOOK_ALLOW_PRIVATE_NETWORKS": True, "WEBHOOK_BACKOFF_S": 0.2}  # noqa: F405
