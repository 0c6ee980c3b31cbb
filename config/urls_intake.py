"""The intake server's URLs (gunicorn, the port call systems post to): the REST API and its schema only.

The board, the admin and the login are the web process's (daphne, docs/architecture.md §5): on the intake port
they do not exist, so a call system's credentials can never reach a dispatcher's pages there, and an address
scanner finds no login form to lock dispatchers out with. The probes and /metrics are answered by middleware
before any URL is resolved (config/health.py, config/metrics.py); the guidance stream answers 421 here and
names the web address (triage/api/stream.py).
"""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("api/v1/", include("triage.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
]
